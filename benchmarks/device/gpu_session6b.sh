# Session 6, second call: tile images checked against MLX's transpose and timed, every prefill configuration against
# fp32, the bulk-copy kernels side by side, and the grid with the default (4 stages) and with 3 stages.
set -x
python3 benchmarks/tile_image_check.py $OUT/tile-image.json > $OUT/tile-image.txt 2>&1; cat $OUT/tile-image.txt
timeout 200 python3 benchmarks/attention_gpu.py check-prefill > $OUT/check-prefill.log 2>&1; tail -5 $OUT/check-prefill.log
mkdir -p $OUT/grid-s4 $OUT/grid-s3
timeout 100 python3 -m ksearch.cli bench attention --full --out $OUT/grid-s4 2>&1 | tail -2
KSEARCH_WGMMA_CONFIG=ws3_n64_s3_p4_bulk timeout 100 python3 -m ksearch.cli bench attention --full --out $OUT/grid-s3 2>&1 | tail -2
timeout 200 python3 benchmarks/attention_wgmma_check.py $OUT ws3_n64_s4_p4_bulk ws3_n64_s3_p4_bulk ws3_n64_s3_p4 wg3_n64_ca 2>&1 | grep "^{'D'"
