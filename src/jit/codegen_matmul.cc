// SPDX-License-Identifier: Apache-2.0
// Placeholder until the matmul family lands: no op of this family is compiled (they stay interpreted).
#include "jit/kernel_abi.h"

namespace shapevm::jit {
const KernelFamily* matmulFamily(OpId) { return nullptr; }
}  // namespace shapevm::jit
