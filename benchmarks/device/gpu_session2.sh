#!/usr/bin/env bash
# Second device call (after .device/b/install.sh): the Mamba stage diagnosis, the MLX-CUDA overhead probe, then offline
# searches from the naive kernels of gqa_decode and attention for the time given each. Usage: bash ... [SECONDS]
set -u
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
S=${1:-120}
timeout 150 python3 benchmarks/mamba_gpu_diag.py 2>&1 | tail -40 | tee $OUT/mamba_diag.txt
timeout 90 python3 benchmarks/mlx_cuda_overhead.py $OUT/overhead.json 2>&1 | tail -12
for t in gqa_decode attention; do
  timeout $((S + 60)) python3 -m ksearch.cli run $t --backend mlx-cuda --budget 120 --wall-time $S \
    --runs-dir /tmp/runs --quiet 2>&1 | tail -14
  r=$(ls -d /tmp/runs/*-$t-* | tail -1)
  bash benchmarks/device/search_record.sh "$r" $t-evals.txt
done
ls -la $OUT
