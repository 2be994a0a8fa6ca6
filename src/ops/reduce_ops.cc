// SPDX-License-Identifier: Apache-2.0
// PLACEHOLDER: reference kernels for the reduce family are being written.
#include "ops/registry.h"

namespace shapevm {
void registerReduceKernels(OpRegistry& registry) { (void)registry; }
}  // namespace shapevm
