# Nested for loops over two dynamic dims, indexing x[i, j].
# run: --fn f
# dims: r=1..4 c=1..4
# expect: out0 shape ()
from shapevm import ops, Tensor


def f(x: Tensor["r", "c"]):
    acc = ops.zeros(())
    r, c = x.shape
    for i in range(r):
        for j in range(c):
            if j > i:
                continue
            acc = acc + x[i, j]
    return acc
