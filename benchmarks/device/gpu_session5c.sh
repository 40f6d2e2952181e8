#!/usr/bin/env bash
# One device call, 2026-11-30: a producer warpgroup (setmaxnreg: 24 registers for it, the rest to the consumers)
# against the default synchronous kernel; the grid with the best one if it wins by > 3%.
set -u
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
KS_CHECK_LENGTHS=4096,8192 timeout 300 python3 benchmarks/attention_wgmma_check.py $OUT wg3_n64 ws3_n64_s4_p4 ws3_n64_s3_p4 ws2_n128_s3_p4 \
  2>&1 | grep -v "^{'float\|_runs_differ" | cut -c1-500 | tail -10
best=$(python3 benchmarks/wgmma_compare.py $OUT/wgmma-check.json wg3_n64 0.03 ws3_n64_s4_p4 ws3_n64_s3_p4 ws2_n128_s3_p4)
echo "best: $best"
if [ -n "$best" ]; then
  KSEARCH_WGMMA_CONFIG=$best timeout 200 python3 -m ksearch.cli bench attention --full --out $OUT 2>&1 | tail -2
fi
ls $OUT
