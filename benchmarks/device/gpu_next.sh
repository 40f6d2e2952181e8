#!/usr/bin/env bash
# The next device calls, prepared when this session's device time was spent (after .device/b/install.sh). Two parts,
# each inside one call's 10 minutes:
#   bash benchmarks/device/gpu_next.sh 1   # the wgmma prefill's first run (which layout variant is right, then its speed
#                                   # vs cuDNN and mma.sync); the Mamba model GPU tests incl. the fused layout
#   bash benchmarks/device/gpu_next.sh 2   # per-phase clocks of one gqa_decode and one attention evaluation of the naive
#                                   # kernels (gqa_decode's search finished none in 180 s; attention's took 25-33 s),
#                                   # then the gqa_decode search for what time is left
set -u
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
part=${1:-1}
if [ "$part" = 1 ]; then
  timeout 300 python3 benchmarks/attention_wgmma_check.py $OUT 2>&1 | tail -30
  timeout 240 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_gpu_mamba.py -k model_and_patch 2>&1 \
    | tail -8 | tee $OUT/gpu_tests_mamba_model.log
else
  timeout 150 python3 benchmarks/eval_phases.py gqa_decode src/ksearch/tasks/starters/gqa_decode_cuda.py mlx-cuda \
    2>&1 | tail -14 | tee $OUT/gqa_decode-naive-eval-phases.txt
  timeout 100 python3 benchmarks/eval_phases.py attention src/ksearch/tasks/starters/attention_cuda.py mlx-cuda \
    2>&1 | tail -14 | tee $OUT/attention-naive-eval-phases.txt
  timeout 300 python3 -m ksearch.cli run gqa_decode --backend mlx-cuda --budget 120 --wall-time 240 \
    --runs-dir /tmp/runs --quiet 2>&1 | tail -12
  r=$(ls -d /tmp/runs/*-gqa_decode-* | tail -1)
  python3 -m ksearch.cli bench search-summary "$r" --out $OUT 2>&1 | tail -2
fi
ls -la $OUT
