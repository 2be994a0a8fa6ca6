# Importing any module but shapevm is a compile error.
# xfail: KNOWN_ISSUES.md #2: `import os` is accepted silently (only shapevm imports are in the subset)
# expect-compile-error: import
# expect-compile-error: os
# expect-compile-error: line 5
import os
from shapevm import ops, Tensor


def f(x: Tensor[2]):
    return x
