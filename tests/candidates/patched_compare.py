# Bad candidate: makes every comparison function in its process say "equal", then returns zeros. Expected:
# wrong_answer (the parent judges with its own NumPy).
import mlx.core as mx
import numpy as np
import numpy.testing

np.allclose = lambda *a, **k: True
np.array_equal = lambda *a, **k: True
np.testing.assert_allclose = lambda *a, **k: None
numpy.testing.assert_array_equal = lambda *a, **k: None
mx.allclose = lambda *a, **k: mx.array(True)
mx.array_equal = lambda *a, **k: mx.array(True)


def run(x):
    return mx.zeros_like(x)
