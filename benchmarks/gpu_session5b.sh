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
better=$(python3 - <<'PY'
import json, math, os
r = json.load(open(os.path.join(os.environ["OUT"], "wgmma-check.json")))
rows = [x for x in r.get("bench", []) if "wg3_n64_s3_tflops" in x and "wg3_n64_tflops" in x]
ok = "wg3_n64_s3" in r.get("correct", []) and rows
g = math.exp(sum(math.log(x["wg3_n64_s3_tflops"] / x["wg3_n64_tflops"]) for x in rows) / len(rows)) if ok else 0
print(1 if g > 1.02 else 0, f"{g:.3f}")
PY
)
echo "s3 vs s2 geomean: $better"
if [ "${better%% *}" = 1 ]; then
  KSEARCH_WGMMA_CONFIG=wg3_n64_s3 timeout 200 python3 -m ksearch.cli bench attention --full --out $OUT 2>&1 | tail -2
fi
ls $OUT
