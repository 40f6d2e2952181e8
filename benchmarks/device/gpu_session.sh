#!/usr/bin/env bash
# One device call for issues 6 and 7 (after .device/b/install.sh): MLX-CUDA overhead profile, the GPU tests of the
# Mamba and attention modules, `ksearch bench mamba`, then an offline search on selective_scan for what time is left.
# Every step has its own limit and writes into $OUT as it goes. Usage: bash benchmarks/device/gpu_session.sh [SEARCH_SECONDS]
set -u
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
S=${1:-150}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 90 python3 benchmarks/mlx_cuda_overhead.py $OUT/overhead.json 2>&1 | tail -20
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_gpu_mamba.py tests/test_gpu_attention.py \
  2>&1 | tail -30 | tee $OUT/gpu_tests.log
timeout 170 python3 -m ksearch.cli bench mamba --reps 5 --out $OUT 2>&1 | tail -25
if [ "$S" -gt 0 ]; then
  timeout $((S + 40)) python3 -m ksearch.cli run selective_scan --backend mlx-cuda --budget 120 --wall-time $S \
    --runs-dir /tmp/runs --quiet 2>&1 | tail -15
  r=$(ls -d /tmp/runs/*-selective_scan-* | tail -1)
  bash benchmarks/device/search_record.sh "$r" scan_evals.txt
fi
ls -la $OUT
