#!/usr/bin/env bash
# The lead's batch on the GPU machine (see README "What was verified where"): GPU tests, the naive candidates of every
# task, offline searches on softmax and rmsnorm. Results land in $OUT. Usage on the device, after MLX is installed:
#   bash benchmarks/device/gpu_batch.sh [SEARCH_BUDGET]
set -u
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
B=${1:-20}
python3 -c 'import mlx.core as mx; assert mx.cuda.is_available()' || { echo "MLX-CUDA missing"; exit 3; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 170 python3 -m pytest -q -m gpu -p no:cacheprovider -x tests/test_gpu_foundation.py \
  tests/test_knowledge_exemplars.py 2>&1 | tail -25 | tee $OUT/gpu_tests.log
timeout 170 python3 -m ksearch.cli bench naive --backend mlx-cuda --out $OUT 2>&1 | grep -E "wrote|passed|error|Error" | tail -12
for t in softmax rmsnorm; do
  timeout 130 python3 -m ksearch.cli run $t --backend mlx-cuda --budget $B --runs-dir /tmp/runs --quiet 2>&1 | tail -12
  r=$(ls -d /tmp/runs/*-$t-* | tail -1)
  python3 -m ksearch.cli bench search-summary "$r" --out $OUT 2>&1 | tail -1
done
ls -la $OUT
