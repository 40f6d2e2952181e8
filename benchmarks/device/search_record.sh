#!/usr/bin/env bash
# What the device scripts keep of a search run: its summary JSON in $OUT (ksearch bench search-summary) and its
# evaluations, one per line (ksearch report RUN --evaluations: index, kind, candidate, status, score, seconds), in
# $OUT/FILE, echoed (its last LINES lines, if given).
#   bash benchmarks/device/search_record.sh RUN_DIR FILE [LINES]
set -u
python3 -m ksearch.cli bench search-summary "$1" --out $OUT 2>&1 | tail -2
COLUMNS=120 python3 -m ksearch.cli report "$1" --evaluations > $OUT/$2
if [ -n "${3:-}" ]; then tail -n "$3" $OUT/$2; else cat $OUT/$2; fi
