#!/usr/bin/env bash
# Session 6, last call: the offline search on attention from the naive kernel, with the flash_wgmma family now
# rendering the bulk-copy kernel, for the wall time given (then its holdout evaluation). Usage: bash ... [SECONDS]
set -u
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
S=${1:-360}
timeout $((S + 170)) python3 -m ksearch.cli run attention --backend mlx-cuda --budget 120 --wall-time $S \
  --runs-dir /tmp/runs --quiet 2>&1 | tail -14
r=$(ls -d /tmp/runs/*-attention-* | tail -1)
bash benchmarks/device/search_record.sh "$r" attention-evals.txt
