#!/usr/bin/env bash
# One device call (after .device/b/install.sh), 2026-11-30: the wgmma prefill after the loop rework (FA-3 order, P
# double-buffered, P's row sums on the tensor cores, one-address loads, launch bounds): which configurations are
# correct and how fast at L=4096/8192, then correctness over the grid against fp32, then the whole grid.
set -u
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
KS_CHECK_LENGTHS=4096,8192 timeout 260 python3 benchmarks/attention_wgmma_check.py $OUT wg3_n64 wg2_n128 ws3_n64_s4_p0 \
  2>&1 | grep -v "^{'float\|_runs_differ" | cut -c1-600 | tail -16
timeout 120 python3 benchmarks/attention_gpu.py check-prefill 2>&1 | tail -4
timeout 200 python3 -m ksearch.cli bench attention --full --out $OUT 2>&1 | tail -3
ls $OUT
