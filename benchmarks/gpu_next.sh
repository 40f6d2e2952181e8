#!/usr/bin/env bash
# The next device call, prepared when this session's device time was spent (after .device/b/install.sh):
# 1. the wgmma prefill kernel's first run (which layout variant is right, then its speed vs cuDNN and mma.sync);
# 2. the Mamba model tests that the last call's time limit cut, with the fused layout (its agreement check);
# 3. one gqa_decode and one attention evaluation of the naive kernel with a per-phase clock (gqa_decode's search
#    finished no evaluation in 180 s; attention's took 25-33 s each).
set -u
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
timeout 240 python3 benchmarks/attention_wgmma_check.py $OUT 2>&1 | tail -30
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_gpu_mamba.py -k model_and_patch 2>&1 | tail -8 \
  | tee $OUT/gpu_tests_mamba_model.log
timeout 200 python3 benchmarks/eval_phases.py gqa_decode src/ksearch/tasks/starters/gqa_decode_cuda.py mlx-cuda \
  2>&1 | tail -14 | tee $OUT/gqa_decode-naive-eval-phases.txt
timeout 120 python3 benchmarks/eval_phases.py attention src/ksearch/tasks/starters/attention_cuda.py mlx-cuda \
  2>&1 | tail -14 | tee $OUT/attention-naive-eval-phases.txt
ls -la $OUT
