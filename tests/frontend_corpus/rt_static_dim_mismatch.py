# An input whose static dim differs from the annotation is rejected on entry, naming the parameter.
# run: --fn f
# no-diff: the entry check of annotations is ShapeVM's; CPython ignores annotations
# input: x shape=(2,64)
# expect-runtime-error: 'x'
# expect-runtime-error: 128
from shapevm import ops, Tensor


def f(x: Tensor[None, 128]):
    return x.sum(axis=1)
