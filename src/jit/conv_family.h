// SPDX-License-Identifier: Apache-2.0
// Registration of the conv kernel family (src/jit/llvm_cpu/codegen_conv.cc), which familyFor()
// consults after the matmul family. Kept out of kernel_abi.h so that adding the family did not
// change the header every JIT file includes; it belongs next to matmulFamily() there.
#pragma once

#include "jit/kernel_abi.h"

namespace shapevm::jit {

// The conv family for OpId::Conv (pointwise, dense float32 and depthwise convs), else nullptr.
const KernelFamily* convFamily(OpId op);

}  // namespace shapevm::jit
