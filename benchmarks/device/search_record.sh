#!/usr/bin/env bash
# What the device scripts keep of a search run: its summary JSON in $OUT (ksearch bench search-summary) and one line
# per evaluation (index, status, score, seconds) in $OUT/FILE, echoed (its last LINES lines, if given).
#   bash benchmarks/device/search_record.sh RUN_DIR FILE [LINES]
set -u
python3 -m ksearch.cli bench search-summary "$1" --out $OUT 2>&1 | tail -2
python3 -c "import sqlite3,sys; [print(*r) for r in sqlite3.connect(sys.argv[1]).execute(
  'select eval_index, status, round(score,3), round(duration_s,1) from evaluations')]" "$1/run.db" > $OUT/$2
if [ -n "${3:-}" ]; then tail -n "$3" $OUT/$2; else cat $OUT/$2; fi
