def f(x: Tensor[3], mode: int):
    if mode == 0:
        y = x + 1.0
    elif mode == 1:
        y = x * 2.0
    return y
