#!/usr/bin/env bash
# One device call (after .device/b/install.sh): the producerless mbarrier wgmma kernel (ws3_n64_s4_p0) checked and
# timed against the default (wg3_n64) and cuDNN; if it is faster over those shapes (geomean, by more than 3%), the
# whole prefill grid again with it as the configuration (KSEARCH_WGMMA_CONFIG).
set -u
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
KS_CHECK_LENGTHS=4096,8192 timeout 150 python3 benchmarks/attention_wgmma_check.py $OUT wg3_n64 ws3_n64_s4_p0 2>&1 \
  | grep -v "^{'float\|_runs_differ" | cut -c1-400 | tail -12
better=$(python3 - <<'PY'
import json, math, os
r = json.load(open(os.path.join(os.environ["OUT"], "wgmma-check.json")))
rows = [x for x in r.get("bench", []) if "ws3_n64_s4_p0_tflops" in x and "wg3_n64_tflops" in x]
ok = "ws3_n64_s4_p0" in r.get("correct", []) and rows
g = math.exp(sum(math.log(x["ws3_n64_s4_p0_tflops"] / x["wg3_n64_tflops"]) for x in rows) / len(rows)) if ok else 0
print(1 if g > 1.03 else 0, f"{g:.3f}")
PY
)
echo "mb vs wg3 geomean: $better"
if [ "${better%% *}" = 1 ]; then
  KSEARCH_WGMMA_CONFIG=ws3_n64_s4_p0 timeout 150 python3 -m ksearch.cli bench attention --full --out $OUT 2>&1 | tail -2
fi
ls $OUT
