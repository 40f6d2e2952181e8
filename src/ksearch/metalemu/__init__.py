"""MLX-Metal kernels executed off the Mac."""
