// SPDX-License-Identifier: Apache-2.0
// oneDNN matmul primitives as the matmul family's library candidates (KernelParams::library = 1):
// a float32/bfloat16/float16 C = A @ B of matrices or stacks of them (up to two batch axes,
// broadcast where an operand has none; any strides) whose epilogue oneDNN post-ops express
// (eltwise activations, binary ops with a broadcast operand: bias, residual). The compiled kernel
// is a stub that calls runLibraryMatmul() with the primitive prepare() found in a process-wide
// cache keyed by the exact shapes, strides and dtypes (created once per key; the compile creates
// the static shapes' primitive, so it counts as compile time). Invariant: a primitive that cannot
// be created is an error (the candidate fails, the generated kernel is used); one that fails at
// run time falls back to a scalar loop over the same operands, logged once with the reason.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "jit/kernel_abi.h"
#include "shapevm/status.h"

namespace shapevm::jit::onednn {

// What a library kernel's symbol ends its stem with (codegen_matmul.cc) and how it is recognized.
inline constexpr std::string_view kSymbolSuffix = "_onednn";
inline bool isLibrarySymbol(std::string_view symbol) {
  return symbol.find(kSymbolSuffix) != std::string_view::npos;
}

// Library candidates on: oneDNN is built in and the LibraryCandidates tunable is 1.
bool available();
// OK when a oneDNN primitive can express `spec` (rank 2..4 operands of one dtype, a post-op for
// every epilogue step, no gate program); else the reason. Whether oneDNN can create it on this
// CPU is only known once prepared (createFor / prepareCall).
Status expressible(const KernelSpec& spec);
// Creates (or finds) the primitive for a spec whose dims are all static, operands dense: the
// compile's share of the work. An error when oneDNN cannot create it (dtype, ISA).
Status createFor(const KernelSpec& spec);
// prepare(): finds or creates the primitive for this call (matmul's canonical views in `args`,
// its task count in scalars[kScalarTasks]) and stores it in args.scalars[kScalarLibrary]; an
// error when oneDNN cannot create it.
Status prepareCall(const KernelSpec& spec, KernelArgs& args);
// The task runner a library kernel calls (the matmul runner's signature; `part` is unused).
void runLibraryMatmul(void* part, const KernelArgs* args, std::int64_t tasks, std::int64_t scratch_bytes);

struct LibraryStats {
  std::uint64_t primitives = 0;    // created (cache entries)
  double create_ms = 0;            // spent creating them
  std::uint64_t calls = 0;         // runLibraryMatmul calls
  std::uint64_t run_failures = 0;  // executions oneDNN refused (computed by the fallback loop)
};
LibraryStats stats();
// Tests: make every execution fail as oneDNN would at run time (exercises the fallback).
void failExecutionsForTesting(bool fail);

}  // namespace shapevm::jit::onednn
