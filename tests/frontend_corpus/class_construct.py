# A class whose construct(self, x) reads parameters self.w and self.b (bound from --params).
# run: --fn Linear.construct
# dims: n=1..6
# param: w (5, 4)
# param: b (5,)
# expect: out0 shape (n, 5)
from shapevm import ops, Tensor


class Linear:
    def construct(self, x: Tensor["n", 4]):
        return x @ self.w.T + self.b
