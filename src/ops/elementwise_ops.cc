// SPDX-License-Identifier: Apache-2.0
// PLACEHOLDER: reference kernels for the elementwise family are being written.
#include "ops/registry.h"

namespace shapevm {
void registerElementwiseKernels(OpRegistry& registry) { (void)registry; }
}  // namespace shapevm
