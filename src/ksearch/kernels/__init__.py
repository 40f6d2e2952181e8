"""ksearch.kernels: the library of fast kernels, plain functions dispatched by backend."""

from ksearch.kernels.attention import attention
from ksearch.kernels.decode import decode
from ksearch.kernels.selective_scan import selective_scan, selective_state_update

__all__ = ["attention", "decode", "selective_scan", "selective_state_update"]
