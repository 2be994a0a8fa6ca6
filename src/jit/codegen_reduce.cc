// SPDX-License-Identifier: Apache-2.0
// Placeholder until the reduce family lands: no op of this family is compiled (they stay interpreted).
#include "jit/kernel_abi.h"

namespace shapevm::jit {
const KernelFamily* reduceFamily(OpId) { return nullptr; }
}  // namespace shapevm::jit
