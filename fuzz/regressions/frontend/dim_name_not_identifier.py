# Every loop body is wrapped in LoopStart/LoopEnd (for and while).
# run: --fn f
# dims: n=1q.4
# expect: out0 shape (3,)
# expect-dis-count: 2 LoopStart
# expect-dis: LoopEnd
from shapevm import ops, Tensor


def f(x: Tensor["%n", 3]):
    acc = x[0] * 0.0
    for i in range(x.shape[0]):
        acc = acc + x[i]
    j = 0
    while j < 2:
        acc = acc * 0.5
        j += 1
    return acc
