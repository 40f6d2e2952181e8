# Session 6, first call: tile images by MLX ops timed, then the bulk-copy producer kernel (its images then built with
# tile_image, MLX ops; now tile_images, our kernel) checked and timed side by side with the cp.async producer.
set -x
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv
python3 - <<'PY' > $OUT/tile_image.txt 2>&1
import time, mlx.core as mx
from ksearch.kernels.attention.wgmma_ws import tile_image
for b,h,s in ((1,8,8192),(1,32,2048),(4,32,8192),(1,8,2048)):
  for d in (64,128):
    x=mx.random.normal((b,h,s,d)).astype(mx.float16); mx.eval(x)
    for _ in range(3): mx.eval(tile_image(x))
    mx.synchronize(); t0=time.perf_counter()
    for _ in range(20): mx.eval(tile_image(x))
    mx.synchronize(); dt=(time.perf_counter()-t0)/20
    print(dict(B=b,H=h,S=s,D=d,us=round(dt*1e6,1),GBps=round(2*x.nbytes/dt/1e9,1)))
PY
cat $OUT/tile_image.txt
KS_CHECK_LENGTHS=4096,8192 timeout 520 python3 benchmarks/attention_wgmma_check.py $OUT ws3_n64_s3_p4 ws3_n64_s3_p4_bulk ws3_n64_s2_p4_bulk ws3_n64_s4_p4_bulk wg3_n64_ca 2>&1 | tail -40
