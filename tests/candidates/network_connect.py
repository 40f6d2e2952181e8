# Bad candidate: opens a TCP connection to a port the test listens on at 127.0.0.1, and sends a UDP datagram to
# another, as a candidate would to send what it found or fetch an answer. Reports both. Computes honestly. Expected:
# no connection and no datagram reach the test.
import os
import socket

import mlx.core as mx

_tcp, _udp = (int(p) for p in os.environ["KSEARCH_TEST_PORTS"].split(","))
try:
    with socket.create_connection(("127.0.0.1", _tcp), timeout=3) as _s:
        _s.sendall(b"hello from a candidate")
    print("tcp: connected")
except OSError as _exc:
    print(f"tcp: refused ({type(_exc).__name__}: {_exc.strerror})")
try:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as _s:
        _s.sendto(b"hello from a candidate", ("127.0.0.1", _udp))
    print("udp: sent")
except OSError as _exc:
    print(f"udp: refused ({type(_exc).__name__}: {_exc.strerror})")


def run(x):
    xf = x.astype(mx.float32)
    e = mx.exp(xf - mx.max(xf, axis=-1, keepdims=True))
    return (e / mx.sum(e, axis=-1, keepdims=True)).astype(x.dtype)
