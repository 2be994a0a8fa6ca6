# SPDX-License-Identifier: Apache-2.0
# The debugger tests' program (tests/python/test_debugger.py): a user-function call, a loop and a
# line whose code dead-code elimination removes. Line numbers are part of the golden transcripts.
from shapevm import ops, Tensor


def scale(t, k: float):
    doubled = t * k
    return doubled + 1.0


def main(x: Tensor["n", 4], steps: int):
    unused = x * 3.0
    y = scale(x, 2.0)
    acc = y * 1.0
    for i in range(steps):
        acc = acc + y
    total = ops.tanh(acc)
    return acc, total
