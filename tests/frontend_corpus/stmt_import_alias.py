# The `import shapevm.ops as ops` form of the import, and a module-level constant.
# run: --fn f
# dims: n=1..4
# expect: out0 shape (n, 3)
import shapevm.ops as ops
from shapevm import Tensor

SCALE = 0.5


def f(x: Tensor["n", 3]):
    return ops.tanh(x) * SCALE
