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
// A primitive's B that is a weight (the kernel's packed operand, packedB) is reordered once into
// the layout oneDNN chose for it and read from that copy by a second primitive made for it, while
// the same B tensor comes back; every other B (external memory, a new tensor per call) is read
// where it is, as before.
//
// Where the epilogue is not all post-ops (an op oneDNN has none for, a gate program such as the
// LSTM cell's gates), KernelParams::library = 2 ("impl=onednn+tail") is one candidate of two
// parts: the primitive, with the epilogue's leading steps that are post-ops, writes the product,
// then the kernel's generated part function (emitTail) applies the rest of the epilogue and the
// program. The product goes to the output itself (no gate program: the tail finishes it in place,
// element by element) or, for a gate program, whose outputs are not the product, to the calling
// thread's tail buffer (ir::threadBuffer: grown to the largest product that thread has run, kept
// for the thread's life, never allocated per call; prepareCall sizes it).
//
// float32 matmuls also get dnnl_sgemm (library = 3, 4): the same cache entry, problem and
// fallback, but each matrix of the stack is one row-major sgemm call (an operand whose rows or
// columns are unit-stride maps to transa/transb 'N'/'T' and its lda/ldb; the output's columns
// must be). A stack of at least kernel_threads matrices is split across the kernel pool's tasks,
// one OpenMP thread each; a smaller one runs its matrices in turn on kernel_threads OpenMP threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <vector>

#include "jit/kernel_abi.h"
#include "shapevm/status.h"

namespace llvm {
class Function;
}  // namespace llvm

namespace shapevm::jit::onednn {

// KernelParams::library: the primitive alone, or the primitive and a generated tail; float32
// only, oneDNN's dnnl_sgemm alone ("impl=sgemm": no epilogue) or followed by a generated tail
// that runs the whole epilogue ("impl=sgemm+tail": sgemm has no post-ops). sgemm is a separate
// micro-kernel from the primitive's (on the Intel AMX host of BENCHMARKS.md 11–36% faster).
inline constexpr int kPrimitive = 1;
inline constexpr int kPrimitiveAndTail = 2;
inline constexpr int kSgemm = 3;
inline constexpr int kSgemmAndTail = 4;
inline constexpr int kMaxLibrary = kSgemmAndTail;
// Primitives kept at most (one per shape bucket seen; never evicted: prepared calls point at
// them). Packed-B twins (packedB) are made only while the cache is under half full.
inline constexpr std::size_t kMaxPrimitives = 512;
inline bool isSgemm(const KernelParams& params) {
  return params.library == kSgemm || params.library == kSgemmAndTail;
}
inline bool hasTail(const KernelParams& params) {
  return params.library == kPrimitiveAndTail || params.library == kSgemmAndTail;
}

// What a library kernel's symbol ends its stem with (codegen_matmul.cc) and how it is recognized.
inline constexpr std::string_view kSymbolSuffix = "_onednn";
inline constexpr std::string_view kTailSymbolSuffix = "_onednn_tail";
inline constexpr std::string_view kSgemmSymbolSuffix = "_onednn_sgemm";
inline constexpr std::string_view kSgemmTailSymbolSuffix = "_onednn_sgemm_tail";
inline std::string_view symbolSuffix(const KernelParams& params) {
  if (isSgemm(params)) return hasTail(params) ? kSgemmTailSymbolSuffix : kSgemmSymbolSuffix;
  return hasTail(params) ? kTailSymbolSuffix : kSymbolSuffix;
}
inline bool isLibrarySymbol(std::string_view symbol) {
  return symbol.find(kSymbolSuffix) != std::string_view::npos;
}

// Library candidates on: oneDNN is built in and the LibraryCandidates tunable is 1.
bool available();
// Whether the compile thread has had oneDNN generate its sgemm kernels in this process (the
// program-layout preparation does, once). An sgemm that ran some other way (a tuning timing of
// impl=sgemm) may have generated them too without this knowing: callers only err on caution.
bool sgemmKernelsGenerated();
// OK when the candidate spec.params.library names can compute `spec`; else the reason. The
// primitive alone (0 or 1): rank 2..4 operands of one dtype, a post-op for every epilogue step,
// no gate program. With a tail (2): the same operands, and an epilogue that is not all post-ops
// or a gate program (the family checks the rest as for its generated kernels). Whether oneDNN can
// create the primitive on this CPU is only known once prepared (createFor / prepareCall).
Status expressible(const KernelSpec& spec);
// The library candidates of a search space for `spec` (whatever its params): {library = 1} where
// post-ops express the epilogue, else {library = 2} where a tail can finish it; for float32 also
// {library = 3} without an epilogue, else {library = 4}; none when available() is false.
std::vector<KernelParams> candidates(const KernelSpec& spec);
// How many leading epilogue steps the primitive runs as post-ops (all of them for library = 1,
// none for sgemm).
std::size_t postOpSteps(const KernelSpec& spec);
// Fills `part` (void(ptr args, i64 task, i64 tasks, ptr product), empty) with the tail of a
// library = 2 or 4 kernel: this task's rows of the product (dense [rows, N] in the output dtype), the
// epilogue from postOpSteps() on, then the gate program into its outputs, or back into the
// product (the output) without one.
Status emitTail(const KernelSpec& spec, llvm::Function* part);
// Creates (or finds) the primitive for a spec whose dims are all static, operands dense: the
// compile's share of the work. An error when oneDNN cannot create it (dtype, ISA).
Status createFor(const KernelSpec& spec);
// prepare(): finds or creates the primitive for this call (matmul's canonical views in `args`,
// its task count in scalars[kScalarTasks]) and stores it in args.scalars[kScalarLibrary]; an
// error when oneDNN cannot create it.
Status prepareCall(const KernelSpec& spec, KernelArgs& args);
// The task runner a library kernel calls (the matmul runner's signature; `part` is unused).
void runLibraryMatmul(void* part, const KernelArgs* args, std::int64_t tasks, std::int64_t scratch_bytes);
// A library = 2 or 4 kernel's runner (prepareCall puts it in scalars[kScalarRunner]): the primitive
// into the product, then `part` (the tail) on `tasks` threads of the kernel pool.
void runLibraryTail(void* part, const KernelArgs* args, std::int64_t tasks, std::int64_t scratch_bytes);

// B as the kernel's packed operand (KernelFamily::packedOperand; prepareCall() ran) for a
// primitive (library = 1, 2) of a single-matrix B whose chosen layout is not B's own: the runtime
// reorders B once into that layout (PackMode::PackOnly: nothing computed) and later calls with the
// same B tensor read the packed copy (PackMode::Read) through the primitive made for it, instead
// of oneDNN copying B on every call. The packed copy names its layout, so a primitive for other
// rows that chose another reads B where it is. None for sgemm, batched B, or packing off.
PackedOperand packedB(const KernelSpec& spec, const KernelArgs& args);
void usePackedB(KernelArgs& args, void* buffer, PackMode mode);

struct LibraryStats {
  std::uint64_t primitives = 0;    // created (cache entries)
  double create_ms = 0;            // spent creating them
  std::uint64_t calls = 0;         // runLibraryMatmul calls
  std::uint64_t run_failures = 0;  // executions oneDNN refused (computed by the fallback loop)
  std::uint64_t tail_calls = 0;    // of the calls, those a generated tail finished (library = 2, 4)
  std::uint64_t sgemm_calls = 0;   // of the calls, those dnnl_sgemm computed (library = 3, 4)
  std::uint64_t b_packs = 0;       // B reordered into a packed copy (PackMode::PackOnly calls)
  std::uint64_t packed_calls = 0;  // of the calls, those that read a packed B
  std::uint64_t prepare_hits = 0;  // prepareCall()s that reused the thread's record of the same layouts
};
LibraryStats stats();
// Tests: make every execution fail as oneDNN would at run time (exercises the fallback).
void failExecutionsForTesting(bool fail);

}  // namespace shapevm::jit::onednn
