# return from inside a loop and from an if branch (several return sites, same output count).
# run: --fn f
# arg: limit=0..5
# runs: 4
# expect: out0 shape (3,)
from shapevm import ops, Tensor


def f(x: Tensor[None, 3], limit: int):
    acc = x[0] * 0.0
    for i in range(x.shape[0]):
        if i >= limit:
            return acc, i
        acc = acc + x[i]
    if acc.sum() > 0.0:
        return acc * 2.0, -1
    return acc, -2
