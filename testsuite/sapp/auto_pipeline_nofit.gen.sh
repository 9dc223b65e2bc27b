# The graph of auto_pipeline_applied with 1 MB of device memory: even the configured 4 stages do not
# fit (1.1 x 1.06 MiB), so the note gives the fallback advice (spec sapp-search.md §5: mem_coeff 1024,
# batch 1), also without --auto-pipeline, and the stage number stays.
"${GEN:-$(dirname "$0")/../gen/gen-transformer}" -L 4 -b 8 -s 32 -H 64 -n 4 -f 128 -v 128
