#!/usr/bin/env bash
# One device call, 2026-11-30: the Hopper dispatch as shipped (producer warpgroup at D=128 without a mask, the
# synchronous kernel elsewhere): correctness against fp32, the grid, the flash_wgmma template family's holdout
# GPU test, then Nsight Compute's headline counters on the producer-warpgroup kernel.
set -u
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
timeout 150 python3 benchmarks/attention_gpu.py check-prefill 2>&1 | grep -v " ok$" | tail -6
timeout 200 python3 -m ksearch.cli bench attention --full --out $OUT 2>&1 | tail -2
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider "tests/test_gpu_attention.py::test_tensor_core_families_pass_the_holdout_workloads" \
  2>&1 | tail -4 | tee $OUT/holdout-gpu-test.log
timeout 60 ncu --graph-profiling node -k regex:ks_flash -s 1 -c 1 --section SpeedOfLight --section WarpStateStats \
  --metrics sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum \
  python3 benchmarks/ncu_attention.py 8192 128 > $OUT/ncu-ws3p4.txt 2>&1
grep -E "Issue Slots|tensor_cycles|inst_executed|Duration|Warp Cycles Per Issued" $OUT/ncu-ws3p4.txt | cut -c1-120
ls $OUT
