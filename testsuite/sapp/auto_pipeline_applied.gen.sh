# A 4-layer LLaMA-style graph planned for 16 devices in 4 pipeline stages (one layer per stage by the
# --stage rules), 4 micro-batches, --auto-pipeline and 1200 KB of device memory.  The estimate (spec
# sapp-search.md §5) of the configured pipeline, dp 2 and mp 1 read off the MatMuls, fits; so does the
# one of 2 stages with mp doubled, but not that of 1 stage: the stage number becomes 2, the search
# rolls back one level instead of two, stages 0-1 and 2-3 merge, and the lowered ranks still compute
# the single device's loss (8 ranks of the last stage return it).  Compare auto_pipeline_kept.
"${GEN:-$(dirname "$0")/../gen/gen-transformer}" -L 4 -b 8 -s 32 -H 64 -n 4 -f 128 -v 128
