# SPDX-License-Identifier: Apache-2.0
# Functions and Modules that test_python_module.py compiles with @shapevm.jit / shapevm.Module.
# They are plain here (decorated by the tests) so a test can compile one at any jit_level; the
# line numbers of the error cases are part of the tests (LINE_* below name them).
import numpy as np

import shapevm
from shapevm import Tensor, ops


def scaled_softmax(x: Tensor[None, None], t: float):
    return ops.softmax(x * t, axis=-1)


def _double(x: Tensor[None, None]):
    return x * 2.0


def calls_helper(x: Tensor[None, None]):
    return _double(x) + 1.0


@shapevm.jit  # compiled at import, before defined_later exists
def calls_later(x: Tensor[None]):
    return defined_later(x) * 2.0


def defined_later(x: Tensor[None]):
    return x + 1.0


def add(x: Tensor[None], y: Tensor[None]):
    return x + y


def fixed_width(x: Tensor[None, 4]):
    return x * 2.0


def identity(x: Tensor[None, None]):
    return x


def tail_rows(x: Tensor[None, None]):
    return x[1:]


def two_outputs(x: Tensor[None], y: Tensor[None]):
    return x + y, x * y


def shape_and_sum(x: Tensor[None, None]):
    return x.shape, ops.sum(x), x.shape[0] * 2, x.shape[0] > 1


def half_scale(x: Tensor[None]):
    return x * 2.0


def bf16_roundtrip(x: Tensor[None]):
    return ops.cast(x, ops.bfloat16) * 2.0


def bf16_dense_and_transposed(x: Tensor[None, None]):
    y = ops.cast(x, ops.bfloat16) * 2.0
    return y, ops.transpose(y)


def poly(x: Tensor[None, None]):
    y = x * x
    y = y + 3.0 * x
    y = ops.tanh(y) - 0.5
    return ops.exp(y) * x


# ---- error cases (the tests check these line numbers) ----

def bad_matmul(a: Tensor[None, None], b: Tensor[None, None]):
    c = a + 1.0
    return c @ b  # LINE_MATMUL


def checked(x: Tensor[None]):
    assert x.shape[0] > 3, "need more than 3 elements"  # LINE_ASSERT
    return x


def pick(x: Tensor[None], i: int):
    return x[i]  # LINE_INDEX


def grow(x: Tensor[None], n: int):
    for _ in range(n):  # LINE_LOOP
        x = x + 1.0
    return x


def take(x: Tensor[None], idx: Tensor[None]):
    return ops.gather(x, idx, axis=0)  # LINE_GATHER


def big(n: int):
    return ops.zeros((n, n))  # LINE_ALLOC


def unknown_op(x: Tensor[None]):
    return ops.nonexistent(x)  # LINE_UNKNOWN


def uses_try(x: Tensor[None]):
    try:  # LINE_TRY
        return x
    finally:
        pass


def uses_comprehension(x: Tensor[None]):
    return [x for _ in range(2)]  # LINE_COMPREHENSION


def uses_numpy(x: Tensor[None]):
    return np.exp(x)  # LINE_NUMPY


def with_star_args(*xs):
    return xs


class Affine(shapevm.Module):
    def __init__(self, rows, cols, seed=0, **options):
        super().__init__(**options)
        rng = np.random.default_rng(seed)
        self.weight = rng.standard_normal((rows, cols)).astype(np.float32)
        self.bias = rng.standard_normal(rows).astype(np.float32)

    def construct(self, x: Tensor[None, None]):
        return ops.matmul(x, self.weight.T) + self.bias


def line_of(marker):
    """The line of this file that carries `# MARKER`."""
    with open(__file__) as f:
        for number, text in enumerate(f, 1):
            if text.rstrip().endswith("# " + marker):
                return number
    raise KeyError(marker)
