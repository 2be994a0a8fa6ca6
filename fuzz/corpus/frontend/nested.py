from shapevm import ops
def f(x: Tensor[None, 4], n: int):
    y = -(x * 2.0) ** 2
    for i in range(n):
        if ops.sum(y) > 0.0:
            y = ops.relu(y[:, 1:3]) + (1.0 if n > 2 else 2.0)
        else:
            y = y.T.T
    return y
