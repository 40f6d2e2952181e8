#!/usr/bin/env bash
# One device call (after .device/b/install.sh): the producerless mbarrier wgmma kernel (ws3_n64_s4_p0) checked and
# timed against the default (wg3_n64) and cuDNN; if it is faster over those shapes (geomean, by more than 3%), the
# whole prefill grid again with it as the configuration (KSEARCH_WGMMA_CONFIG).
set -u
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
KS_CHECK_LENGTHS=4096,8192 timeout 150 python3 benchmarks/attention_wgmma_check.py $OUT wg3_n64 ws3_n64_s4_p0 2>&1 \
  | grep -v "^{'float\|_runs_differ" | cut -c1-400 | tail -12
better=$(python3 benchmarks/wgmma_compare.py $OUT/wgmma-check.json wg3_n64 0.03 ws3_n64_s4_p0)
echo "faster than wg3_n64 by 3%: ${better:-none}"
if [ -n "$better" ]; then
  KSEARCH_WGMMA_CONFIG=$better timeout 150 python3 -m ksearch.cli bench attention --full --out $OUT 2>&1 | tail -2
fi
ls $OUT
