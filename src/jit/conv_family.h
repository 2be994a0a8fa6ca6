// SPDX-License-Identifier: Apache-2.0
// Registration of the conv kernel family (src/jit/llvm_cpu/codegen_conv.cc), which familyFor()
// consults after the matmul family. Kept out of kernel_abi.h so that adding the family did not
// change the header every JIT file includes; it belongs next to matmulFamily() there.
#pragma once

#include <span>
#include <vector>

#include "jit/kernel_abi.h"

namespace shapevm::jit {

// The conv family for OpId::Conv (pointwise, dense float32 and depthwise convs), the max_pool
// family (the depthwise conv's window loop taking the max) for OpId::MaxPool, else nullptr.
const KernelFamily* convFamily(OpId op);

// Whether the conv family compiles a conv with attributes `attrs` (schema order) over operands of
// these dtypes and shapes (x, w, the bias if any, then the epilogue's operands) with `epilogue`
// fused into its store. The region planner makes such a conv a step that absorbs its elementwise
// consumers (bias, folded batch norm, activations, a residual add), as a matmul step does.
struct ConvOperand {
  DType dtype;
  Shape shape;
};
bool convStepSupported(const std::vector<AttrValue>& attrs, std::span<const ConvOperand> operands,
                       const std::vector<EpilogueStep>& epilogue);

// A conv kernel's generated code does not depend on the batch and spatial extents (a dense
// conv's im2col geometry is read per call, a depthwise loop reads them from its arguments; only
// the guard would): a region's conv step takes them unbounded, so one kernel serves a multi-scale
// stream instead of each new size missing the guard. The channels and the weight stay baked in.
void openConvExtents(KernelSpec& spec);

// A max_pool or avg_pool kernel reads every extent and its pads per call (one kernel for any N, C,
// D, H and W): a region's pool step (an opaque step with its own kernel) takes them all unbounded,
// as a conv step does, instead of the profiled size, which every other size of a multi-scale
// stream misses (it then ran the reference kernel). Other ops' specs are left as they are.
void openPoolExtents(KernelSpec& spec);

}  // namespace shapevm::jit
