#!/usr/bin/env bash
# One device call, 2026-11-30: where the default prefill's global sectors and stalls go (Nsight Compute memory tables
# and per-SASS-instruction source counters), then 2 vs 3 K/V stages, then the grid with 3 if they win by > 2%.
set -u
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
N="ncu --graph-profiling node -k regex:ks_flash -s 1 -c 1"
$N --section MemoryWorkloadAnalysis_Tables python3 benchmarks/ncu_attention.py 8192 128 > $OUT/ncu-memtables.txt 2>&1
grep -v "^ *$" $OUT/ncu-memtables.txt | grep -iE "sector|request|wavefront|bank|excess" | cut -c1-160 | head -30
$N --section SourceCounters --page source --print-source sass --csv python3 benchmarks/ncu_attention.py 8192 128 \
  > $OUT/ncu-sass.csv 2>&1; wc -l $OUT/ncu-sass.csv; head -c 600 $OUT/ncu-sass.csv; echo
KS_CHECK_LENGTHS=4096,8192 timeout 200 python3 benchmarks/attention_wgmma_check.py $OUT wg3_n64 wg3_n64_s3 \
  2>&1 | grep -v "^{'float\|_runs_differ" | cut -c1-400 | tail -9
better=$(python3 benchmarks/wgmma_compare.py $OUT/wgmma-check.json wg3_n64 0.02 wg3_n64_s3)
echo "faster than wg3_n64 by 2%: ${better:-none}"
if [ -n "$better" ]; then
  KSEARCH_WGMMA_CONFIG=$better timeout 200 python3 -m ksearch.cli bench attention --full --out $OUT 2>&1 | tail -2
fi
ls $OUT
