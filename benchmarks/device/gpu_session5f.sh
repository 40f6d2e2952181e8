#!/usr/bin/env bash
# One device call, 2026-11-30: the Hopper dispatch as shipped (D=128: producer warpgroup; D=64: synchronous kernel,
# cp.async through L1): correctness against fp32, then the whole grid.
set -u
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
timeout 150 python3 benchmarks/attention_gpu.py check-prefill 2>&1 | grep -v " ok$" | tail -6
timeout 200 python3 -m ksearch.cli bench attention --full --out $OUT 2>&1 | tail -2
ls $OUT
