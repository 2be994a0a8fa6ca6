// SPDX-License-Identifier: Apache-2.0
// oneDNN convolution primitives as the conv family's library candidate (KernelParams::library = 1,
// "impl=onednn"): a float32 or bfloat16 (float16 where oneDNN has it on this CPU) 1-D/2-D/3-D
// conv (any kernel, stride, dilation, padding, groups) of dense NCHW tensors as ShapeVM stores
// them (bfloat16/float16: reordered into oneDNN's blocked layouts for its AMX/AVX-512 kernels,
// accumulated in float32 and rounded once), with the bias as the primitive's and the fused
// epilogue (activations, a residual add, scalar bounds) as post-ops. On oneDNN's blocked layouts
// (convs with a spatial kernel) a residual add is the sum post-op: the operand reordered into the
// blocked output, which the conv adds to (oneDNN 2.6's blocked kernels have no whole-tensor
// binary post-op; without it such convs ran oneDNN's slow im2col on the plain layouts). The compiled kernel is a stub
// that calls runLibraryConv() with the primitive prepareCall() found in a process-wide cache keyed
// by the call's exact shapes and attributes (created once per key; a conv with static extents has
// it created by the compile, so it counts as compile time). The tensors stay in their plain
// layout: oneDNN reads the weight where it is or, for its blocked kernels, from a reordered copy
// that the kernel's packed-operand cache keeps while the same (immutable) weight tensor comes
// back. Invariant: a primitive that cannot be created is an error (the candidate fails to
// compile, or the call runs on the generated kernel the library kernel holds beside its stub,
// else on the reference kernel); one that fails at run time falls back to a direct loop over the
// same operands, logged once with the reason.
#pragma once

#include <cstdint>
#include <span>

#include "jit/kernel_abi.h"
#include "shapevm/status.h"
#include "shapevm/value.h"

namespace shapevm::jit::onednn_conv {

// Library convs on: oneDNN is built in and the LibraryCandidates tunable is 1.
bool available();
// OK when the primitive can compute `spec` (a conv of float32 or bfloat16 x, w and bias, float16
// where this oneDNN has a float16 conv, whose epilogue steps are all post-ops: eltwise
// activations, binary ops on an operand of the output's shape or of one element, float32 or of
// the conv's dtype); else the reason. Whether oneDNN creates it on this CPU is known once prepared.
Status expressible(const KernelSpec& spec);
// Creates (or finds) the primitive of a spec whose dims are all static: the compile's share. An
// error when oneDNN cannot create it; OK without creating anything when some dim is dynamic.
Status createFor(const KernelSpec& spec);
// prepare(): the primitive for this call's tensors (found or created) in scalars[kScalarLibrary],
// the runner in scalars[kScalarRunner]; an error when oneDNN cannot create it.
Status prepareCall(const KernelSpec& spec, std::span<const Value* const> inputs, const Tensor& out, KernelArgs& args);
// The task runner the library kernel calls (the matmul runner's signature; `part` is unused).
void runLibraryConv(void* part, const KernelArgs* args, std::int64_t tasks, std::int64_t scratch_bytes);

// The weight of a call whose primitive reorders it into oneDNN's layout, as the kernel's packed
// operand (KernelFamily::packedOperand; prepareCall() ran): the runtime reorders it once
// (PackMode::PackOnly) and later calls with the same weight tensor read the reordered copy
// (PackMode::Read) instead of reordering it afresh. None when the primitive reads it in place.
PackedOperand packedWeight(const KernelArgs& args);
void usePackedWeight(KernelArgs& args, void* buffer, PackMode mode);

struct ConvLibraryStats {
  std::uint64_t primitives = 0;       // created (cache entries)
  double create_ms = 0;               // spent creating them
  std::uint64_t calls = 0;            // runLibraryConv calls
  std::uint64_t run_failures = 0;     // executions oneDNN refused (computed by the fallback loop)
  std::uint64_t weight_reorders = 0;  // calls that reordered their weight (no packed copy of it)
  std::uint64_t operand_reorders = 0;  // calls that reordered a residual add into the blocked output (sum post-op)
  std::uint64_t races = 0;             // problems that timed other primitives too: a weight-bound blocked one's on
                                       // the plain layouts, a stem's on its input as it is (and 16-channel blocks out)
  std::uint64_t plain_picks = 0;       // those where the plain one was faster (it runs their later calls)
  std::uint64_t input_as_is_picks = 0;  // those where the one on the input as it is was faster
};
ConvLibraryStats stats();
// Tests: make every execution fail as oneDNN would at run time (exercises the fallback).
void failExecutionsForTesting(bool fail);
// Tests: make every primitive lookup fail as a creation oneDNN refuses would.
void failCreationsForTesting(bool fail);

}  // namespace shapevm::jit::onednn_conv
