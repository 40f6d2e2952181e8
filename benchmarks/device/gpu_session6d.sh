# Session 6, fourth call: two consumer warpgroups (128-row blocks: more blocks at L=2048) against three, bulk copies.
set -x
KS_CHECK_LENGTHS=2048,4096 timeout 300 python3 benchmarks/attention_wgmma_check.py $OUT ws2_n64_s4_p4_bulk ws3_n64_s4_p4_bulk ws2_n64_s3_p4_bulk 2>&1 | grep "^{'D'\|error"
