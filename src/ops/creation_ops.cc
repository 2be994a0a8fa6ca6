// SPDX-License-Identifier: Apache-2.0
// PLACEHOLDER: reference kernels for the creation family are being written.
#include "ops/registry.h"

namespace shapevm {
void registerCreationKernels(OpRegistry& registry) { (void)registry; }
}  // namespace shapevm
