#!/usr/bin/env bash
# Session 7, first call: the causal grid in sections (longest tiles of many heads first) checked against fp32 and
# timed side by side with the old order; where an attention evaluation's time goes in a search (one Evaluator,
# three candidates); the grid with the final kernel.
set -u
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
(timeout 200 python3 benchmarks/attention_gpu.py check-prefill 2>&1 | tee $OUT/check-prefill.log | grep -c ok;
 grep "FAIL\|failures\|Error" $OUT/check-prefill.log | head -20)
timeout 130 python3 benchmarks/prefill_sections.py $OUT 2>&1 | tail -52
timeout 160 python3 benchmarks/eval_phases.py attention mlx-cuda src/ksearch/tasks/starters/attention_cuda.py \
  'family:attention.cuda.flash_wgmma:{"wg":3,"bn":64,"producer":true}' \
  'family:attention.cuda.flash_wgmma:{"wg":2,"bn":64,"producer":false}' 2>&1 | tail -40 | tee $OUT/attention-eval-phases.txt
timeout 110 python3 -m ksearch.cli bench attention --full --out $OUT 2>&1 | tail -3
ls $OUT
