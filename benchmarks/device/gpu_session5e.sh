#!/usr/bin/env bash
# One device call, 2026-11-30: side by side in one process, the synchronous kernel and the producer warpgroup, each
# with cp.async through L2 only (cg) and through L1 (ca), causal and not, D=64 and 128 (after a cheaper causal mask).
set -u
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
KS_CHECK_LENGTHS=4096,8192 timeout 300 python3 benchmarks/attention_wgmma_check.py $OUT wg3_n64 ws3_n64_s3_p4 wg3_n64_ca ws3_n64_s3_p4_ca \
  2>&1 | grep -v "^{'float\|_runs_differ" | cut -c1-600 | tail -10
ls $OUT
