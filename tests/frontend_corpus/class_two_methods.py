# A class with two methods; --fn Model.decode picks one, and a module-level helper is called.
# run: --fn Model.decode
# dims: n=1..4
# param: emb (6, 3)
# expect: out0 shape (n, 6)
from shapevm import ops, Tensor


def norm(x):
    return x / ops.sqrt((x * x).sum(axis=-1, keepdims=True) + 1e-6)


class Model:
    def encode(self, x: Tensor["n", 6]):
        return x @ self.emb

    def decode(self, z: Tensor["n", 3]):
        return norm(z @ self.emb.T)
