// SPDX-License-Identifier: Apache-2.0
// Kernel validation: before any kernel becomes callable it runs on fresh random inputs of its
// target signature (never zeros; for a range kernel also at the range ends) and is compared with
// the reference kernel. Outputs are poisoned with NaN beforehand, so an element the kernel never
// wrote fails; NaN never passes. Tolerances are relative L2 error per output dtype.
// Cheap by construction (<= a few ms per kernel): dynamic dims run at clipped sizes (same
// residue modulo 192 as the observed size or the range's high end, so the same register-tile and
// vector remainders; the low end exactly; a shorter period where the family declares its paths
// repeat sooner, clip_period.h: the elementwise family's middle axes), and large outputs are sampled: a 2-D matmul's
// reference computes the first, the last and strided rows, and every row is checked through a
// random projection (C v against A (B v)); an elementwise op's output is sampled only above 2^14
// elements: by rows at rank <= 2, by lines along the last axis at rank >= 3 (the corner lines of
// the first and the last row, and a diagonal that meets every index of every short axis). Every
// element the kernel wrote is checked for the poison. Kernels
// from the kernel cache are validated like fresh ones. Not covered: a fault that appears only
// above the clipped sizes whatever the remainders (e.g. only past 1000 rows).
// Validation runs kernels on one thread (KernelThreadsOnThisThread): it runs on a lowered compile
// thread, and a split call would wait for workers that compete with the program for its cores.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "jit/compiled_kernel.h"
#include "vm/profile.h"

namespace shapevm::jit {

// Relative L2 bound for an output of this dtype: float32 1e-5, float16 2e-3, bfloat16 1.6e-2
// (about four units of their rounding error), float64 1e-12, exact for integers and bool.
double toleranceFor(DType dtype);

struct Comparison {
  bool ok = true;
  double rel_l2 = 0.0;   // worst over the outputs
  std::string reason;    // why not ok: "output 0: NaN at element 17 (expected 0.25)" / "rel L2 3e-3 > 1e-5"
};
// Compares kernel outputs with reference outputs (same count, dtypes and shapes required).
Comparison compareOutputs(std::span<const Value> expected, std::span<const Value> actual);

// A fresh tensor filled with poison: NaN (float32: the quiet NaN; other floating dtypes: all bits set), 0x5A bytes
// (integers), 2 (bool), so an element a kernel leaves unwritten shows in the comparison.
Expected<Tensor> poisonedTensor(DType dtype, const Shape& shape);
// The first element (in row-major order) of `t` still the poison: a NaN of any kind (floating
// dtypes), a byte above 1 (bool); -1 when none. Integer poison may be a valid value: never found.
std::int64_t firstPoisoned(const Tensor& t);

// Random inputs for `spec` with these concrete shapes (one per input; ignored for scalars), drawn
// from the op's valid domain (positive for log/sqrt/rsqrt/pow bases), never all zeros.
Expected<std::vector<Value>> randomInputs(const KernelSpec& spec, std::span<const Shape> shapes, std::uint64_t seed,
                                          std::span<const bool> positive = {});
// True when validation must draw input `input` of `op` from positive values (log, sqrt, divisors ...).
bool needsPositiveInput(OpId op, std::size_t input);

// The concrete input shapes to validate a spec on: `observed` (one shape list taken from the
// profile) with every dynamic dim clipped (above max(its low end, 192): the smallest size
// from there congruent to it modulo 192, times its divisor; with a shorter family clip period p:
// above max(p, 2, its low end + 1), modulo p), plus, for every ranged dynamic dim,
// those shapes moved to the range's low end and to its high end clipped the same way. Dims of
// other inputs with the same observed extent move with it; a dim whose clipped size would equal
// another dim's extent, or whose extent a static dim also has, keeps its own.
std::vector<std::vector<Shape>> validationShapes(const KernelSpec& spec, std::span<const Shape> observed);

// Runs `kernel` and the reference kernel (on sampled rows, see above) on random inputs for every
// shape set; OK or the first failure with its reason (shapes included). On the smallest set, a
// call that packed an operand into the kernel's cache (PackedOperandCache) runs twice, so the
// cached packing is checked too; the cache is emptied afterwards. A kernel from the kernel cache
// that fails is dropped from it (KernelCache::forget).
Status validateKernel(const CompiledKernel& kernel, std::span<const std::vector<Shape>> shape_sets, std::uint64_t seed);

// The program's calls a compile thread prepares library kernels for. While a ProgramCallsScope is
// open on a thread, a library matmul that prepares a call there (a validation run) also creates its
// primitive (and packed-B twin) for the program's calls: at every row count M the profile saw for
// its K and N, at every task count the program's thread may split across. The program's first call
// at a profiled shape then finds its primitive: the interpreter never creates one.
// With `defer_creation`, a library kernel hands that work to defer() instead, and the compile thread
// runs it with createDeferred() once validation passed and before the install, outside validation's
// clock and counted as codegen (KernelBackend::threadLibraryCodegenMs counts all of it).
struct ProgramCalls {
  struct Matmul {
    // One layout of the program's operands at row count m: A's and B's row and column strides in
    // elements. A primitive is made for one layout: a transposed weight (B's strides 1, K) or a row
    // slice of a wider A (a row stride above K) needs its own, which validation's dense inputs
    // never create.
    struct Layout {
      std::int64_t m = 0;
      std::int64_t a[2] = {0, 0}, b[2] = {0, 0};
      bool operator==(const Layout&) const = default;
    };
    std::int64_t k = 0, n = 0;
    std::vector<std::int64_t> rows;  // M
    std::vector<Layout> layouts;     // the profiled records' (those with strides), each once
  };
  std::vector<Matmul> matmuls;
  std::vector<int> threads = programKernelThreads();
  bool defer_creation = false;
  // An untuned (O1) library kernel being compiled, whose fallback is the generated kernel: where
  // one of the program's layouts would first need a library's one-time code generation in this
  // process (oneDNN's sgemm kernels, ~40 ms of the compile thread before the install), the
  // library kernel does not compile, saying why, and the generated one installs instead.
  bool avoid_one_time_codegen = false;
  // True when `work` was kept for createDeferred() (defer_creation); false: the caller does it now.
  bool defer(std::function<void()> work) const;
  // Runs the deferred work in order and drops it.
  void createDeferred();
  // Drops it (the kernel that asked for it failed validation).
  void dropDeferred() { deferred_.clear(); }
  std::size_t deferredCount() const { return deferred_.size(); }
  // A 2-D matmul site's records (A [M, K], B [K, N]) joined in; other records are left out. A record
  // with both operands' strides (every stride positive, no dimension of 1) adds its layout.
  void addMatmul(std::span<const ProfileRecord> records);
  // The calls of the scope open on this thread; nullptr when none is.
  static const ProgramCalls* current();
  // The task counts kernelThreads() may give a program's thread: KernelThreads when > 0, else
  // availableCores() with no compile thread busy and with one busy.
  static std::vector<int> programKernelThreads();

 private:
  mutable std::vector<std::function<void()>> deferred_;
};
class ProgramCallsScope {
 public:
  explicit ProgramCallsScope(const ProgramCalls& calls);
  ~ProgramCallsScope();
  ProgramCallsScope(const ProgramCallsScope&) = delete;
  ProgramCallsScope& operator=(const ProgramCallsScope&) = delete;

 private:
  const ProgramCalls* saved_;
};

}  // namespace shapevm::jit
