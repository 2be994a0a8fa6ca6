# range() with 1, 2 and 3 arguments, including a negative step; the loop variable is a scalar.
# run: --fn f
# arg: n=0..6
# expect: out0 value sum(range(n)) + sum(range(2, n)) + sum(range(n, 0, -2))
from shapevm import ops, Tensor


def f(n: int):
    total = 0
    for i in range(n):
        total += i
    for i in range(2, n):
        total += i
    for i in range(n, 0, -2):
        total += i
    return total
