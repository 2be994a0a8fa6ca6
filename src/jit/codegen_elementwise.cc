// SPDX-License-Identifier: Apache-2.0
// Placeholder until the elementwise family lands: no op of this family is compiled (they stay interpreted).
#include "jit/kernel_abi.h"

namespace shapevm::jit {
const KernelFamily* elementwiseFamily(OpId) { return nullptr; }
}  // namespace shapevm::jit
