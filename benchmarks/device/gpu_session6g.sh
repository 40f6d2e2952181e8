# Session 6, last call: ping-pong between the consumer warpgroups (FA-3's warp scheduling) against the shipped
# bulk-copy kernel, checked and side by side.
set -x
KS_CHECK_LENGTHS=2048,4096,8192 timeout 250 python3 benchmarks/attention_wgmma_check.py $OUT ws3_n64_s4_p4_bulk_pp ws3_n64_s4_p4_bulk 2>&1 | grep "^{'D'\|error\|timed out" | cut -c1-400
