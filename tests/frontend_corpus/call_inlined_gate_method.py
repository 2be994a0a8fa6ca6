# A gate method, a helper with a default and an early return, and a recursive helper: the small
# non-recursive callees are inlined (no Call left in the entry), the recursive one stays a call;
# the --opt list without `inline` keeps every call.
# run: --fn Cell.construct --arg depth=2
# dims: b=1..4
# param: w (4, 8)
# expect: out0 shape (b, 2)
# expect: out1 shape (b, 2)
# expect-dis-count: 1 /\bCall\b/
# expect-dis-count[--opt=dce,reshape,addn,fold]: 5 /\bCall\b/
from shapevm import ops, Tensor


def clip(t, limit: float = 3.0):
    if limit <= 0.0:
        return t
    return ops.minimum(ops.maximum(t, -limit), limit)


def halve(t, depth: int):
    if depth <= 0:
        return t
    return halve(t * 0.5, depth - 1)


class Cell:
    def construct(self, x: Tensor["b", 4], c: Tensor["b", 2], depth: int):
        i, f, g, o = ops.split(clip(x @ self.w), 4, axis=1)
        c_next = self.gate(f) * c + self.gate(i) * ops.tanh(g)
        return self.gate(o) * ops.tanh(halve(c_next, depth)), c_next

    def gate(self, z: Tensor):
        return ops.sigmoid(z)
