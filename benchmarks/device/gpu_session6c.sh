# Session 6, third call: the grid with rounds of ~10 ms (bench attention's round_s) for 3 and 4 stages, and the two
# side by side again (listed in the other order than in the second call).
set -x
mkdir -p $OUT/grid-s4 $OUT/grid-s3
KSEARCH_WGMMA_CONFIG=ws3_n64_s3_p4_bulk timeout 200 python3 -m ksearch.cli bench attention --full --out $OUT/grid-s3 2>&1 | tail -1
KSEARCH_WGMMA_CONFIG=ws3_n64_s4_p4_bulk timeout 200 python3 -m ksearch.cli bench attention --full --out $OUT/grid-s4 2>&1 | tail -1
KS_CHECK_LENGTHS=2048,4096,8192 timeout 200 python3 benchmarks/attention_wgmma_check.py $OUT ws3_n64_s3_p4_bulk ws3_n64_s4_p4_bulk 2>&1 | grep "^{'D'"
