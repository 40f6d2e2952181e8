# Session 6, sixth call: where a small prefill call's time goes (benchmarks/prefill_overhead.py), then the grid with
# the softmax scale made once per head dim.
set -x
timeout 120 python3 benchmarks/prefill_overhead.py $OUT/prefill-overhead.json 2>&1 | tail -8
timeout 200 python3 -m ksearch.cli bench attention --full --out $OUT 2>&1 | tail -1
