# break and continue inside for and while loops.
# run: --fn f
# arg: n=1..9
# expect: out1 value sum(i for i in range(n) if i % 2 == 1 and i < 7)
from shapevm import ops, Tensor


def f(x: Tensor[2], n: int):
    total = 0
    y = x
    for i in range(n):
        if i % 2 == 0:
            continue
        if i >= 7:
            break
        total += i
        y = y + x
    j = 0
    while True:
        j += 1
        if j > 3:
            break
    return y, total, j
