// SPDX-License-Identifier: Apache-2.0
// PLACEHOLDER: reference kernels for the shape family are being written.
#include "ops/registry.h"

namespace shapevm {
void registerShapeKernels(OpRegistry& registry) { (void)registry; }
}  // namespace shapevm
