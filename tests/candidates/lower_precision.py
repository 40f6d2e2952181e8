# Bad candidate (rmsnorm): computes in float16 and casts back to the input's dtype. On float32 workloads the error
# is far above float32's tolerance. Expected: wrong_answer.
import mlx.core as mx


def run(x, weight):
    xh = x.astype(mx.float16)
    r = mx.rsqrt(mx.mean(xh * xh, axis=-1, keepdims=True) + 1e-5)
    return (xh * r * weight.astype(mx.float16)).astype(x.dtype)
