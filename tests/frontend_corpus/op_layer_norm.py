# layer_norm with weight and bias parameters, and with eps given by keyword.
# run: --fn Norm.construct
# dims: n=1..5
# param: gamma (8,)
# param: beta (8,)
# expect: out0 shape (n, 8)
from shapevm import ops, Tensor


class Norm:
    def construct(self, x: Tensor["n", 8]):
        return ops.layer_norm(x, self.gamma, self.beta), ops.layer_norm(x * 2.0, self.gamma, None, eps=1e-3)
