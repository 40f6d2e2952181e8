#!/usr/bin/env bash
# Session 7: the offline search on attention from the naive kernel, budget 120 evaluations, over two device calls.
#   bash benchmarks/device/gpu_session7b.sh start SECONDS WALL   # a new run with --wall-time WALL (its total over
#                                                                # both calls), stopped after SECONDS; the run
#                                                                # directory comes back in $OUT/runs
#   bash benchmarks/device/gpu_session7b.sh resume SECONDS RUNDIR  # continue it; it ends itself at WALL (then
#                                                                  # judges the best on the holdout workloads)
set -u
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
mkdir -p /tmp/runs $OUT/runs
if [ "$1" = start ]; then
  timeout -k 5 "$2" python3 -m ksearch.cli run attention --backend mlx-cuda --budget 120 --wall-time "$3" \
    --runs-dir /tmp/runs --quiet 2>&1 | tail -14
  r=$(ls -d /tmp/runs/*-attention-* | tail -1)
else
  r=/tmp/runs/$(basename "$3")
  rm -rf "$r"; cp -r "$3" "$r"
  timeout -k 5 "$2" python3 -m ksearch.cli run --resume "$r" --quiet 2>&1 | tail -24
fi
cp -r "$r" $OUT/runs/
bash benchmarks/device/search_record.sh "$r" attention-evals.txt 60
