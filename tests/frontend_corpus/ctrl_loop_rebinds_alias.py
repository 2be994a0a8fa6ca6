# A variable copied from a single-assignment variable and rebound in a loop; the original is read
# after the loop (found by difftest: the copy took over the original's register, so reading it
# after the loop was an internal compiler error "may be read before it is written").
# run: --fn main
# dims: n=1..5
# arg: k=0..3
# expect: out1 shape ()
from shapevm import ops, Tensor


def main(x: Tensor["n", 4], k: int):
    t = x * 2.0
    acc = t
    for i in range(k):
        acc = ops.tanh(acc)
    return acc, ops.sum(t), t
