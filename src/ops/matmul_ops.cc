// SPDX-License-Identifier: Apache-2.0
// PLACEHOLDER: reference kernels for the matmul family are being written.
#include "ops/registry.h"

namespace shapevm {
void registerMatmulKernels(OpRegistry& registry) { (void)registry; }
}  // namespace shapevm
