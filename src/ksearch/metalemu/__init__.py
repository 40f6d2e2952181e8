"""MLX-Metal kernels executed off the Mac (backend `mlx-metal-emu`): `mx.fast.metal_kernel` bodies run on NVIDIA GPUs
by translation to CUDA (cuda_kernel.metal_kernel_via_cuda) and on CPUs by the CPU engine."""
