"""ksearch: LLM-guided K-Search for fast GPU kernels on MLX (Metal, CUDA, CPU)."""

__version__ = "0.1.0"
