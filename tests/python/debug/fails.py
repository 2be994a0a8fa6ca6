from shapevm import ops, Tensor


def project(z, w):
    return z @ w


def f(x: Tensor["n", 3], w: Tensor[4, 5]):
    y = x * 2.0
    z = ops.relu(y)
    return project(z, w)
