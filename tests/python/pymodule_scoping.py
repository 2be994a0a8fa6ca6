# SPDX-License-Identifier: Apache-2.0
# A user's script as the issue shows it: numpy imported on the shapevm line, and module-level
# arrays whose names the jitted functions reuse as parameters and locals (they must not be copied
# into the compiled program: only free names read from module level are).
import numpy as np, shapevm  # noqa: E401
from shapevm import Tensor, ops

x = np.random.rand(7, 33).astype(np.float32)
y = np.zeros(3)
SCALE = 0.5


def softmax_of_param(x: Tensor[None, None], t: float):
    y = x * t * SCALE
    return ops.softmax(y, axis=-1)
