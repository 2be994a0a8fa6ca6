// SPDX-License-Identifier: Apache-2.0
// The contract between the JIT's code generators and the runtime that calls their kernels.
// A generated kernel is `void svm_<name>(const KernelArgs* args)`: every operand (inputs, then
// outputs) is a base pointer (view offset already applied) plus its shape and element strides.
// The C++ side (KernelFamily) decides support, computes output shapes and prepares the strides
// (e.g. broadcasting = stride 0); the generator bakes every static fact of the KernelSpec into
// the IR and reads the rest from KernelArgs at run time.
// Invariant: a kernel never writes an output before it has finished reading the inputs it
// aliases — outputs are always fresh buffers, distinct from every input.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ops/registry.h"
#include "shapevm/status.h"
#include "shapevm/value.h"
#include "tensor/dim_range.h"

namespace shapevm::jit {

struct FusedProgram;  // fusion.h

inline constexpr int kMaxKernelOperands = 16;

// Plain-old-data argument block; its layout is mirrored in IR by ir::ArgsView (codegen_util.h).
// The caller (invokeCompiled) zeroes the block, fills operand slots 0 .. inputs+outputs-1 with
// each tensor operand's data, shape and strides (inputs, then outputs; a scalar operand's slot
// stays empty), then calls KernelFamily::prepare(), which may rewrite those slots and fill
// family-defined extras:
//  - operand slots past inputs+outputs, as extra shape/stride rows (data unused):
//      reduce, strided kernels only: slot 2 = outer loops (shape: extents, strides: input
//      strides), slot 3 = their output strides (strides only), slot 4 = inner loops (reduced axes
//      or the softmax axis; shape and input strides), slot 5 = the softmax axis' output stride
//      (strides only), innermost loop last in each (see kOuterSlot .. kInnerOutSlot);
//      matmul: slots 3 (a) and 4 (b) = canonical 4-D views [batch0, batch1, rows, cols], stride 0
//      on broadcast batch dims and on the missing axis of a 1-D operand (see kSlotA / kSlotB);
//  - scalars[]: reduce, strided kernels: scalars[0] = 1 for the column style (lanes along the last
//    outer loop), else 0; elementwise: scalars[0..2] = scalar operands (the value's storage bits
//    in its dtype), scalars[3] = 1 when the call can take the flat path; matmul: scalars[0..1]
//    = the task runner and the task count, scalars[2..3] = the packed-operand fields that
//    KernelFamily::usePacked() writes (0, 0: the kernel packs its own B).
// Kernels read slots and scalars the way their family's prepare() wrote them; the runtime never
// interprets the extras.
struct KernelArgs {
  void* data[kMaxKernelOperands];
  std::int64_t shape[kMaxKernelOperands][kMaxRank];
  std::int64_t strides[kMaxKernelOperands][kMaxRank];  // in elements
  std::int64_t scalars[4];                             // family-defined extras (see above)
};
using GeneratedKernelFn = void (*)(const KernelArgs* args);

// One dynamic-or-static dim as the specialization sees it: a dynamic dim's guarded range and
// divisor (every observed value divisible by it) are its DimRange.
struct DimSpec : DimRange {
  std::int64_t size = -1;  // >= 0: static (baked in); -1: dynamic (read from KernelArgs)
  bool isStatic() const { return size >= 0; }
  // What a guard requires of this dim.
  DimRange guarded() const { return isStatic() ? DimRange::exactly(size) : static_cast<const DimRange&>(*this); }
};

struct OperandSpec {
  bool is_tensor = true;      // false: a scalar operand (int/float/bool); kernels read it from KernelArgs.scalars
  ValueKind scalar_kind = ValueKind::None;  // !is_tensor: Int, Float, Bool (guarded), or None (omitted input)
  double scalar_example = 0;  // !is_tensor: a value seen at the site (validation uses values of its kind)
  DType dtype = DType::Float32;
  int rank = 0;
  DimSpec dims[kMaxRank];
  bool contiguous = true;     // guarded: row-major dense
  std::string toString() const;  // "f32[?,128]" / "f32[320..960,128]" / "f32[64%8,128]"
};

// The AutoTuner's knobs for one kernel; 0 = the family's default. A family declares which ones
// it reads and their candidate values in searchSpace(); the tuning database stores toString().
struct KernelParams {
  int mr = 0, nr = 0;          // matmul register tile (rows x columns of C)
  int mc = 0, kc = 0, nc = 0;  // matmul cache blocking
  int k_unroll = 0;            // matmul inner K loop unroll
  int prefetch = 0;            // prefetch distance in K steps (-1: no software prefetch)
  int threads = 0;             // worker threads over the output (0: the KernelThreads tunable)
  int vector_width = 0;        // elementwise/reduction lanes
  int unroll = 0;              // elementwise/reduction interleave (vectors in flight)
  int chunk = 0;               // elements per thread chunk
  int bf16_dot = 0;            // matmul of two bfloat16 operands: 1 = the CPU's bf16 pair dot products
                               // (AVX512_BF16), -1 = widen to float32 and FMA, 0 = the family's choice
  int library = 0;             // matmul: 1 = a oneDNN primitive runs it ("impl=onednn"), 2 = the primitive, then a
                               // generated tail ("impl=onednn+tail"), 0 = generated code
  bool isDefault() const { return *this == KernelParams{}; }
  bool operator==(const KernelParams&) const = default;
  std::string toString() const;                       // "mr=8 nr=32 kc=256" (non-zero fields only; "default")
  static Expected<KernelParams> parse(std::string_view text);  // inverse of toString()
};

// The target a kernel is compiled for, as far as a family's plan and search space depend on it.
// A backend stamps its own into every spec it compiles (KernelBackend::targetSpec); a spec that
// was never stamped (vector_bits == 0) means the default target of the LLVM CPU backend.
struct KernelTarget {
  int vector_bits = 0;       // widest native float vector: 512 (AVX-512), 256 (AVX2), 128 (SSE)
  int vector_registers = 0;  // architectural vector registers (32 zmm, 16 ymm)
  bool bf16_dot = false;     // bfloat16 pair dot products (AVX512_BF16 vdpbf16ps)
  // The core's data caches (the backend's CostHints: L1d, L2, and its share of the L3), bytes;
  // 0 = unknown. The matmul's blocking derives from them.
  std::int64_t l1d_bytes = 0, l2_bytes = 0, l3_bytes = 0;
  bool known() const { return vector_bits > 0; }
  int floatLanes() const { return vector_bits / 32; }  // float32 lanes of one native vector
  bool operator==(const KernelTarget&) const = default;
};

// A matmul epilogue step (fused into the matmul's store): value = op(value) for a unary op, or
// value = op(value, extra) / op(extra, value) (swapped) for a binary op whose other operand is
// spec.inputs[operand] (an input after A and B, broadcastable to the matmul's output shape).
struct EpilogueStep {
  OpId op = OpId::Identity;
  int operand = -1;      // binary: index into KernelSpec::inputs (>= 2); unary: -1
  bool swapped = false;  // binary: extra is the left operand (sub, div, pow ...)
  bool operator==(const EpilogueStep&) const = default;
};

// What to compile: one op (O1) with its attributes and the specialization of its inputs.
struct KernelSpec {
  OpId op = OpId::Identity;
  std::vector<AttrValue> attrs;        // schema order, defaults filled in
  std::vector<OperandSpec> inputs;
  std::vector<EpilogueStep> epilogue;  // matmul only: fused elementwise steps on the output
  KernelParams params;                 // tuning knobs (AutoTuner); default = family defaults
  KernelTarget target;                 // what it is compiled for (set by the backend)
  // The fused family: the region's dataflow (fusion.h). A matmul: a gate epilogue (LSTM-style)
  // evaluated on the product (after `epilogue`), whose columns are G equal blocks of H: the
  // program's iteration shape is [rows..., H] (rank 2 or 3; its leading axes flatten to the
  // product's rows, row-major), and the kernel's outputs are the program's outputs, not the product.
  std::shared_ptr<const FusedProgram> fused;
  // Matmul with `fused`: per program leaf, >= 0 the spec input holding the leaf's view at the
  // iteration shape, < 0 column block -(source + 1) of the product.
  std::vector<int> fused_leaf_source;
  std::string signature() const;       // "MatMul:(320..960,128)x(128,1024)"
};

// The spec that exactly fits these inputs: every dim static, contiguity and dtypes as they are;
// a non-tensor input becomes a scalar operand.
KernelSpec exactSpec(OpId op, std::vector<AttrValue> attrs, std::span<const Value* const> inputs);
// The same spec with every dim of every tensor input dynamic and unbounded (a fully symbolic kernel).
KernelSpec symbolicSpec(KernelSpec spec);

// An input that a family's kernel can read from a buffer packed beforehand (matmul: the whole B
// in the layout its blocking consumes), so the runtime may pack it once and reuse the packing
// while the same tensor comes back (see PackedOperandCache in compiled_kernel.h).
struct PackedOperand {
  int input = -1;          // the packable input of this call; -1: none (the kernel packs as usual)
  std::int64_t bytes = 0;  // size of its packed form (a 64-byte aligned buffer)
  // Cached whatever its size: packing it costs a separate pass per call (the conv's weight
  // reorder), not a share of the kernel's own packing as the matmul's B (PackedWeightMinElements).
  bool any_size = false;
};
enum class PackMode : std::uint8_t {
  Read,      // the call reads the packed operand from the buffer instead of packing it
  PackOnly,  // the call only writes the packed operand into the buffer (no output is touched)
};

// What a family derives from a kernel's spec alone, made once per compiled kernel
// (KernelFamily::launchPlan) so that outputs() and prepare() need not redo it on every launch.
// A plan belongs to the spec it was made from: CompiledKernel keeps it beside its (never changed) spec.
struct LaunchPlan {
  virtual ~LaunchPlan() = default;
};

// What a family of ops needs from its kernels, backend-neutral: support, output shapes, argument
// layout, the oracle and the tuning candidates. The code generator is the backend's part (the
// LLVM CPU backend: LlvmKernelEmitter, which its families also implement). Implementations are
// stateless singletons.
class KernelFamily {
 public:
  virtual ~KernelFamily() = default;
  virtual std::string_view name() const = 0;
  // OK when `spec` can be compiled; else an error whose message is the reason (logged once per site).
  virtual Status supports(const KernelSpec& spec) const = 0;
  // Output dtypes and shapes for these concrete inputs (they already passed the guard).
  virtual Status outputs(const KernelSpec& spec, std::span<const Value* const> inputs, std::span<DType> dtypes,
                         std::span<Shape> shapes) const = 0;
  // Fills KernelArgs beyond data/shape/strides of the actual operands (e.g. broadcast strides,
  // extra operand slots and scalars; see KernelArgs). Default: nothing more.
  virtual Status prepare(const KernelSpec& spec, std::span<const Value* const> inputs, std::span<const Tensor> outputs,
                         KernelArgs& args) const;
  // The launch plan of `spec` (nullptr: the family keeps none), and outputs() / prepare() given
  // the plan made from this very spec (`plan` nullptr: derive it). Defaults: no plan, the plain calls.
  virtual std::unique_ptr<const LaunchPlan> launchPlan(const KernelSpec& spec) const;
  virtual Status plannedOutputs(const KernelSpec& spec, const LaunchPlan* plan, std::span<const Value* const> inputs,
                                std::span<DType> dtypes, std::span<Shape> shapes) const;
  virtual Status plannedPrepare(const KernelSpec& spec, const LaunchPlan* plan, std::span<const Value* const> inputs,
                                std::span<const Tensor> outputs, KernelArgs& args) const;
  // The input this call (KernelArgs after prepare()) could read packed, and the packed size.
  // Default: none.
  virtual PackedOperand packedOperand(const KernelSpec& spec, const KernelArgs& args) const;
  // Points the prepared `args` at `buffer` (packedOperand().bytes, 64-byte aligned) in `mode`.
  // The packing is written and read by the generated code only: one layout, in one place.
  virtual void usePacked(const KernelSpec& spec, KernelArgs& args, void* buffer, PackMode mode) const;
  // A readable symbol stem, e.g. "matmul_f32_Mdyn_K128_N1024" (the engine prefixes "svm_").
  virtual std::string symbolStem(const KernelSpec& spec) const;
  // What the kernel must compute, with the reference kernels (validation's oracle). Default: the
  // spec's op on its first schema-many inputs, then each epilogue step op by op.
  virtual Status reference(const KernelSpec& spec, std::span<const Value* const> inputs, std::span<Value> outputs) const;
  // True when every operand (inputs and outputs) is indexed by the output's axis 0 with its
  // stride, so the runtime may split axis 0 across threads (KernelParams::threads, else the
  // KernelThreads tunable) by calling the kernel on row chunks.
  virtual bool splitsAlongAxis0() const { return false; }
  // The rows of a prepared call (`args` after prepare(), with `inputs` input slots then `outputs`
  // output slots): the output's axis 0, or -1 when the kernel cannot compute a range of rows
  // alone. Default: the output's dim 0 for families that split along axis 0, else -1.
  virtual std::int64_t rowCount(const KernelSpec& spec, const KernelArgs& args, std::size_t inputs,
                                std::size_t outputs) const;
  // Narrows prepared `args` to rows [begin, end) (`item`: bytes per element of each slot). Default:
  // every operand's data moved `begin` steps along its axis-0 stride, its dim 0 set to end - begin.
  virtual void narrowRows(const KernelSpec& spec, KernelArgs& args, const std::size_t* item, std::size_t inputs,
                          std::size_t outputs, std::int64_t begin, std::int64_t end) const;
  // The AutoTuner's candidates for `spec` (each a KernelParams this family reads); empty = nothing
  // to tune. The first candidate is the family's default choice. They fit spec.target (vector
  // width, registers, ISA features): the caller stamps the spec first (KernelBackend::targetSpec).
  virtual std::vector<KernelParams> searchSpace(const KernelSpec& spec) const;
};

// The op's identifier from ops.def, e.g. "MatMul" (used in signatures).
std::string_view opIdent(OpId op);

// The family that compiles `op`, or nullptr (the op stays interpreted).
const KernelFamily* familyFor(OpId op);

// Per-family registration (one file per family under src/jit/).
const KernelFamily* elementwiseFamily(OpId op);   // unary/binary/compare/logical/where/cast
const KernelFamily* reduceFamily(OpId op);        // sum/mean/max/min/softmax/log_softmax
const KernelFamily* matmulFamily(OpId op);        // matmul

}  // namespace shapevm::jit
