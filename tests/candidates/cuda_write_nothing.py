# Bad candidate (mlx-cuda, softmax): a kernel that writes nothing to its output. MLX outputs are uninitialised, so it
# returns whatever the allocator hands it, which may be a freed buffer holding a correct answer. Expected:
# wrong_answer.
import mlx.core as mx

_kernel = mx.fast.cuda_kernel(
    name="softmax_writes_nothing",
    input_names=["x"],
    output_names=["out"],
    source="""
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < 0) out[0] = x[0];
""",
)


def run(x):
    rows = x.shape[0]
    return _kernel(
        inputs=[x], template=[("T", x.dtype)], grid=(rows, 1, 1), threadgroup=(min(256, rows), 1, 1),
        output_shapes=[x.shape], output_dtypes=[x.dtype],
    )[0]
