# `--fn construct` resolves to the only method of that name; two layers of weights, relu between.
# run: --fn construct
# dims: n=1..4
# param: w1 (8, 4)
# param: w2 (3, 8)
# param: scale (3,) positive
# expect: out0 shape (n, 3)
from shapevm import ops, Tensor


class MLP:
    def construct(self, x: Tensor["n", 4]):
        h = ops.relu(ops.matmul(x, ops.transpose(self.w1, (1, 0))))
        return (h @ self.w2.T) * self.scale
