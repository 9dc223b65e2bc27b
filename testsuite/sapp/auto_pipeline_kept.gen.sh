# auto_pipeline_applied without --auto-pipeline: the configuration fits, so nothing is said (the empty
# .err) and the 4 stages stay (4 ranks of the last stage return the loss); the suggestion of 2 stages
# is only in --report.
"${GEN:-$(dirname "$0")/../gen/gen-transformer}" -L 4 -b 8 -s 32 -H 64 -n 4 -f 128 -v 128
