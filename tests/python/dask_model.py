# A small model for the Dask tests (test_dask.py): rows of any count through a dense layer with a
# GELU-like tail; w and b come from a params .npz.
from shapevm import ops, Tensor


def dense(x: Tensor["n", 16], w: Tensor[16, 24], b: Tensor[24]):
    h = x @ w + b
    return ops.tanh(h) * 0.5 + h * 0.25
