// SPDX-License-Identifier: Apache-2.0
// The matmul family: batched C = A @ B for float32/float16/bfloat16 operands (any mix; the result
// dtype is promoteTypes(a, b), computed in float32), ranks 1..4 with numpy broadcasting of the
// batch dims, any strides, and an optional fused epilogue (bias, residual, activations) applied to
// C before it is stored. prepare() rewrites A and B as canonical 4-D views [batch0, batch1, rows,
// cols] in spare KernelArgs slots, and each epilogue operand's strides relative to the output
// [batch0, batch1, M, N] in its own slot, so one kernel body covers every rank.
//
// Loop nest (BLIS-style, every size a KernelParams knob; see Plan): split the output across
// tasks (column panels, or rows when there are few panels), then per batch matrix
//   jc (NC columns) -> pc (KC of K) -> pack B block -> ic (MC rows) -> pack A block
//     -> jr (NR-wide panel) -> ir (MR rows) -> micro-kernel over kc.
// The micro-kernel keeps an MR x NR tile of <16 x float> accumulators in registers: per k step
// NR/16 loads of B, MR broadcasts of A, MR*NR/16 llvm.fmuladd, and a software prefetch of the B
// rows packed next (or, reading B in place, of B a few rows ahead).
// Packing converts to float32 and zero-pads tails, so transposed or 16-bit operands cost the same
// in the inner loop. A float32 B whose layout is known only at run time (B = W.T under a strided
// spec) is packed by compiled C++ (PackBPanelFn, passed in B's view slot): no kernel carries that
// code. Other operands contiguous along K (a row-major A, 16-bit W.T) pack 16 x 16 blocks
// through a register transpose, in functions of their own (see callPacker). B may also be read
// in place (f32, rows contiguous; a tuning candidate for small M). Defaults (see defaultPlan):
// 6x64 tiles, KC from L2; M <= 64: 4x64, KC from L1; packed A and B blocks where A's rows would
// not stay in L2 or all of K is one K block (not for a B of at most 4 panels: A in place, KC from
// L1). M tails re-read a valid row and store nothing; N tails use masked loads/stores.
// When A's rows and B's columns are both contiguous along K and M < MR or N < 16 (x @ W.T for a
// few rows, matrix @ vector), a dot-product path runs instead.
// The kernel body is an internal function `part(args, task, tasks, scratch)`; the exported symbol
// calls back into C++ (the address prepare() stores in scalars[0]) which runs the tasks on the
// ThreadPool with a per-thread, 64-byte aligned scratch buffer for the packed panels.
// Packed weights: for a 2-D B that the plan packs, the caller may pass a buffer for the WHOLE B
// packed (scalars[2]; MatmulFamily::packedOperand). With scalars[3] = 1 the kernel only packs: the
// same loops run, each task over its column panels, writing every block into the buffer instead
// of the scratch, and skip the tiles. Otherwise the tiles read each block from the buffer and
// nothing is packed. The runtime caches that packing per kernel while the same B tensor comes back
// (PackedOperandCache). Layout: K block pc (rows pc .. pc+kc) at pc * Npad floats (Npad = N
// rounded up to NR), its panel at column jr at + jr * kc: each (NC, KC) block is exactly what the
// scratch would hold.
// Loops carry no-unroll / no-vectorize metadata (vectorized by hand; keeps compiles short).
// Invariant: the first K block initializes C (so K = 0 writes zeros), later blocks add to it, and
// only the last one applies the epilogue. A float16/bfloat16 C is only written by the last block:
// the partial sums before it stay float32 in the scratch (widePartials).
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <utility>

#include <fmt/format.h>
#include <llvm/TargetParser/Host.h>

#include "jit/bf16_variant.h"
#include "jit/fusion.h"
#include "jit/kernel_abi.h"
#include "jit/llvm_cpu/codegen_util.h"
#include "jit/llvm_cpu/engine.h"
#include "jit/llvm_cpu/library_onednn.h"
#include "jit/llvm_cpu/llvm_cpu_backend.h"
#include "jit/llvm_cpu/matmul_plan.h"
#include "ops/kernel_util.h"
#include "support/cpu_caches.h"
#include "support/cpu_cores.h"
#include "support/thread_pool.h"
#include "support/tunables.h"

namespace shapevm::jit {
namespace matmul {

// A gate epilogue (KernelSpec::fused on a matmul, see kernel_abi.h): the program's leaf views
// are the spec inputs from epilogueInputsEnd() on; the kernel's outputs are the program's.
bool gateEpilogue(const KernelSpec& spec) {
  return spec.fused != nullptr;
}
std::size_t epilogueInputsEnd(const KernelSpec& spec) {
  std::size_t end = spec.inputs.size();
  if (!gateEpilogue(spec)) return end;
  for (int source : spec.fused_leaf_source) {
    if (source >= 0) end = std::min(end, static_cast<std::size_t>(source));
  }
  return end;
}
// G: the product's column blocks the program reads (one accumulator vector each per tile row).
int gateCount(const KernelSpec& spec) {
  int gates = 0;
  for (int source : spec.fused_leaf_source) gates = std::max(gates, source < 0 ? -source : 0);
  return gates;
}
int outputCount(const KernelSpec& spec) {
  return gateEpilogue(spec) ? static_cast<int>(spec.fused->outputs.size()) : 1;
}

// Canonical view slots: right after the operands (inputs, then the outputs).
int slotA(const KernelSpec& spec) {
  return static_cast<int>(spec.inputs.size()) + outputCount(spec);
}
int slotB(const KernelSpec& spec) {
  return slotA(spec) + 1;
}

bool isComputeFloat(DType dtype) {
  return dtype == DType::Float32 || dtype == DType::Float16 || dtype == DType::BFloat16;
}

// The target's ISA decides (KernelSpec::target, stamped by the backend), never the host's.
bool targetHasAvx512(const KernelSpec& spec) {
  return targetOf(spec).vector_bits >= 512;
}
// The AutoTuner's verdict (jit/bf16_variant.h; pairs before it measured any) for the default
// backend's CPU ($SHAPEVM_JIT_CPU, else the host): the name its capabilities, the tuner's records
// and the kernel cache's key (kernelCacheKey) carry.
bool bf16PairsByDefault() {
  static const std::string cpu = [] {
    Expected<CpuTarget> target = resolveCpuTarget("");
    return target ? target->name : llvm::sys::getHostCPUName().str();
  }();
  return bf16DefaultResolved(cpu) == Bf16Variant::Pairs;
}

bool targetHasBf16Dot(const KernelSpec& spec) {
  return targetOf(spec).bf16_dot;
}

// Native vector registers one tile of `mr` rows x `nr` columns keeps its accumulators in: each
// <16 x float> accumulator is one zmm, or two ymm on a 256-bit target.
int accumulatorRegisters(const KernelTarget& target, int mr, int nr) {
  return mr * nr / std::max(1, target.floatLanes());
}

bool isEpilogueUnary(OpId op) {
  switch (op) {
    case OpId::Neg: case OpId::Abs: case OpId::Relu: case OpId::Exp: case OpId::Log: case OpId::Sqrt:
    case OpId::Sigmoid: case OpId::Tanh: case OpId::Gelu: case OpId::Erf: case OpId::Silu:
      return true;
    default:
      return false;
  }
}

bool isEpilogueBinary(OpId op) {
  switch (op) {
    case OpId::Add: case OpId::Sub: case OpId::Mul: case OpId::Div: case OpId::Maximum: case OpId::Minimum:
      return true;
    default:
      return false;
  }
}

MatmulDims staticDims(const KernelSpec& spec) {
  const OperandSpec& a = spec.inputs[0];
  const OperandSpec& b = spec.inputs[1];
  MatmulDims dims;
  auto size = [](const OperandSpec& op, int axis) { return op.dims[axis].isStatic() ? op.dims[axis].size : -1; };
  dims.m = a.rank == 1 ? 1 : size(a, a.rank - 2);
  dims.k = size(a, a.rank - 1);
  if (dims.k < 0) dims.k = b.rank == 1 ? size(b, 0) : size(b, b.rank - 2);
  dims.n = b.rank == 1 ? 1 : size(b, b.rank - 1);
  return dims;
}

// ---- the plan: KernelParams resolved against the shape and the target CPU ----

// B can be read in place: float32 with contiguous rows (a row-major [K, N] matrix).
bool directBPossible(const KernelSpec& spec) {
  const OperandSpec& b = spec.inputs[1];
  return b.dtype == DType::Float32 && b.contiguous && b.rank >= 2;
}

// The whole B can come packed (see the top of the file): a 2-D B that the plan packs.
bool packableB(const KernelSpec& spec, const Plan& plan) { return spec.inputs[1].rank == 2 && !plan.direct_b; }

// ---- the cache model: blocking from the target's caches (KernelTarget, the backend's CostHints) ----

CacheModel cacheModel(const KernelTarget& target) {
  return {target.l1d_bytes > 0 ? target.l1d_bytes : kFallbackL1dBytes,
          target.l2_bytes > 0 ? target.l2_bytes : kFallbackL2Bytes,
          target.l3_bytes > 0 ? target.l3_bytes : kFallbackL3Bytes};
}

namespace {
constexpr std::int64_t kFloat = 4;
// The largest power of two in [kMinModelKc, kMaxModelKc] whose `bytes_per_k * kc` fits `budget`.
int powerOfTwoKc(std::int64_t budget, std::int64_t bytes_per_k) {
  int kc = kMinModelKc;
  while (kc < kMaxModelKc && 2 * kc * bytes_per_k <= budget) kc *= 2;
  return kc;
}
}  // namespace

int kcForL1(const CacheModel& caches, int mr, int nr) {
  return powerOfTwoKc(caches.l1, (mr + nr) * kFloat);
}
int kcForL2(const CacheModel& caches, int nr) {
  return powerOfTwoKc(caches.l2 / 8, 2 * nr * kFloat);
}
int kcForL2Blocks(const CacheModel& caches, int nr) {
  return powerOfTwoKc(caches.l2 / 4, 2 * nr * kFloat);
}
int mcForL2(const CacheModel& caches, int mr, int kc, int share) {
  const std::int64_t rows = caches.l2 / share / (kc * kFloat) / mr * mr;
  return static_cast<int>(std::clamp<std::int64_t>(rows, mr, kMaxModelMc / mr * mr));
}
int mcForL1(const CacheModel& caches, int mr, int nr) {
  const std::int64_t rows = caches.l1 / 4 / (nr * kFloat) / mr * mr;
  return static_cast<int>(std::clamp<std::int64_t>(rows, mr, kMaxModelMc / mr * mr));
}
int ncForL3(const CacheModel& caches, int nr, int kc, int share) {
  const std::int64_t bytes = std::min(caches.l3 / share, kMaxPackedBBlockBytes);
  const std::int64_t columns = bytes / (kc * kFloat) / nr * nr;
  return static_cast<int>(std::max<std::int64_t>(columns, nr));
}

// A's rows read in place are read again for every B panel of a K block: the block's M x kc floats
// have to stay in L2 between panels, in half of it (the rest holds the panel streamed and the
// one packed next, C's rows and the hardware prefetches).
bool aBlockStaysInL2(const MatmulDims& dims, const CacheModel& caches, int kc) {
  return dims.m * std::min<std::int64_t>(dims.k, kc) * kFloat <= caches.l2 / 2;
}

// The family's default choices for this spec (the first searchSpace candidate): the tile from
// the ISA, the blocking from the caches.
Plan defaultPlan(const KernelSpec& spec) {
  Plan plan;
  const MatmulDims dims = staticDims(spec);
  const CacheModel caches = cacheModel(targetOf(spec));
  const bool small_m = dims.m >= 0 && dims.m <= 64;
  if (!targetHasAvx512(spec)) {
    // 6 x 16: 12 ymm accumulators, the 2 ymm of a B row and a broadcast A value in the rest of
    // the 16 (BLIS's Haswell tile); few rows 4 x 16 (8). B panels read without prefetching: A's
    // rows and the panel in L1 (32 KiB: K blocks of 256 at 6 x 16). On a Sapphire Rapids core
    // compiling for haswell, against oneDNN held to AVX2: 256^3 0.84x -> 0.94x with 6 rows.
    plan.mr = small_m ? 4 : 6;
    plan.vectors = 1;
    plan.nc = 16;
    plan.kc = kcForL1(caches, plan.mr, static_cast<int>(plan.nr()));
  } else {
    // 6 x 64: 24 accumulators, 10 loads per 24 FMAs, the B panel streamed from L2 with the next
    // one prefetched (1 MiB L2: K blocks of 256; 2 MiB: 512). Few rows: 4 x 64 (less of a
    // partial M tile wasted) with K blocks that keep the A rows and the packed panel both in L1
    // (48 KiB: 128). Packed B panels with the next panel's rows prefetched while the tiles run
    // measured faster than reading B in place (nc = -1) even at M = 32 on a Zen 5: B's rows
    // alias in L1/L2 at power-of-two widths.
    plan.mr = small_m ? 4 : 6;
    plan.vectors = 4;
    plan.kc =
        small_m ? kcForL1(caches, plan.mr, static_cast<int>(plan.nr())) : kcForL2(caches, static_cast<int>(plan.nr()));
    plan.prefetch = 1;
    plan.nc = static_cast<int>(plan.nr());
  }
  // Many rows of a float32 matrix product whose A block would not stay in L2 (aBlockStaysInL2)
  // across several panels: BLIS blocks instead, A packed in blocks of a quarter of L2 and B in
  // blocks of a quarter of this CPU's L3 share, so each A block is read from L2 by every panel of
  // a B block and packed once per B block (the search space's first BLIS candidate). Measured on
  // a Sapphire Rapids core (2 MiB L2), process CPU time: 1024^3 0.61x -> 0.81x oneDNN sgemm,
  // 3840x128x1024 0.70x -> 0.98x; compiled for haswell 0.69x -> 0.80x and 0.59x -> 0.78x. Not
  // for bfloat16/float16 operands (the pair dot products read A in place), gate epilogues (one B
  // block spans every column), batches (the conv family's pointwise kernels) or run-time sizes.
  // With AVX-512, more than 64 rows and all of K in one K block (K <= kc), the same blocks even
  // where A's rows would stay in L2, sized for the K block used (K rounded up to 16, not the
  // model's kc): A is then packed once per call and each of its tiles read from L1. Measured on an
  // Intel host (2 MiB L2; process CPU time, 11 interleaved rounds, the median of the per-round
  // ratios to the faster of oneDNN's sgemm and matmul; BENCHMARKS.md, issue 25): 256^3 0.78x ->
  // 0.82x, 320x128x1024 0.84x -> 0.93x, 640x128x1024 0.77x -> 0.89x; 3840x128x1024, blocked
  // before with blocks for K 512, 0.85x -> 0.87x. There A comes in blocks of few rows (mcForL1:
  // the C rows of one panel in a quarter of L1, 48 at 6 x 64 on 48 KiB), each block over all of B's
  // panels before the next, as oneDNN's sgemm runs 64-row blocks there; a block of all rows (up to
  // 1020) wrote 1020 C rows per panel. Same host and clock, alternating processes (BENCHMARKS.md,
  // "What dnnl_sgemm does that our kernel does not"): 640x128x1024 0.73-0.76x -> 0.93-0.94x,
  // 320x128x1024 0.76-0.78x -> 0.90-0.92x, 3840x128x1024 0.85-0.92x -> 0.99-1.14x.
  const OperandSpec& a = spec.inputs[0];
  const OperandSpec& b = spec.inputs[1];
  const bool one_k_block = targetHasAvx512(spec) && !small_m && dims.k > 0 && dims.k <= plan.kc;
  // ...except for a B of at most 4 panels whose A stays in L2: a packed A block would be read by
  // 4 panels at most, so packing it (a transposing copy of all of A) costs about what it saves,
  // while A's rows read in place stay in L2 anyway. A in place, then, B one panel at a time in
  // K blocks that keep the panel and the tile's A rows in L1 (kcForL1; the panel is reused by
  // every row tile), no prefetch. Measured on an Intel host (2 MiB L2; thread CPU time, 11 rounds,
  // median of the per-round ratios to the faster of oneDNN's sgemm and matmul; BENCHMARKS.md,
  // issue 25): 256^3 0.79x -> 0.94x in one process (the old blocks as explicit params), 256x512x256
  // 0.78x -> 0.89x in two runs.
  const bool few_panels = dims.n > 0 && dims.n <= 4 * plan.nr();
  if (one_k_block && few_panels && a.dtype == DType::Float32 && b.dtype == DType::Float32 && a.rank == 2 &&
      b.rank == 2 && dims.m >= 0 && !gateEpilogue(spec) && aBlockStaysInL2(dims, caches, plan.kc)) {
    plan.kc = kcForL1(caches, plan.mr, static_cast<int>(plan.nr()));
    plan.prefetch = 0;
    return plan;
  }
  // Several K blocks in packed A and B blocks (AVX-512): the A block comes from L2 packed, not A's
  // rows, so the panels take a quarter of L2 (kcForL2Blocks: K blocks of 512 on a 1 MiB L2 as on
  // 2 MiB). The B block in half of this CPU's L3 share (up to 4 MiB). On a Zen 5 core (1 MiB L2,
  // 2 MiB of L3 per CPU; BENCHMARKS.md, "The matmul on an AMD EPYC Zen 5", issue 25; thread CPU
  // time, 9-15 rounds, median per-round ratio to oneDNN) 1024^3: kc 256, mc 252 0.88-0.91x -> kc
  // 512, mc 126 0.92-0.97x with B blocks of 512-1024 columns (a quarter of the share, 256 columns:
  // 0.89-0.93x). On the Intel host (2 MiB L2, an L3 share over 8 MiB) both stay what they were.
  if (a.dtype == DType::Float32 && b.dtype == DType::Float32 && a.rank == 2 && b.rank == 2 && dims.m >= 0 &&
      dims.k >= 0 && dims.n > plan.nr() && !gateEpilogue(spec) &&
      (one_k_block || !aBlockStaysInL2(dims, caches, plan.kc))) {
    if (one_k_block) plan.kc = static_cast<int>(std::min<std::int64_t>(plan.kc, (dims.k + 15) / 16 * 16));
    if (!one_k_block && targetHasAvx512(spec)) plan.kc = kcForL2Blocks(caches, static_cast<int>(plan.nr()));
    plan.mc =
        one_k_block ? mcForL1(caches, plan.mr, static_cast<int>(plan.nr())) : mcForL2(caches, plan.mr, plan.kc, 4);
    plan.nc = ncForL3(caches, static_cast<int>(plan.nr()), plan.kc, 2);
    plan.prefetch = 0;
  }
  return plan;
}

Plan resolvePlan(const KernelSpec& spec) {
  Plan plan = defaultPlan(spec);
  const KernelParams& p = spec.params;
  if (p.mr > 0) plan.mr = p.mr;
  if (p.nr > 0) plan.vectors = p.nr / static_cast<int>(kLanes);
  // The default's A and B blocks go together with its K block and its prefetching: params that
  // name any of them get A read in place (mc 0) and B one panel at a time (nc 0) where they
  // leave those unset, as before the default had blocks.
  if (p.kc != 0 || p.mc != 0 || p.nc != 0 || p.prefetch != 0) {
    plan.mc = 0;
    plan.nc = 0;
    if (plan.prefetch == 0) plan.prefetch = targetHasAvx512(spec) ? 1 : 0;
  }
  if (p.kc > 0) plan.kc = p.kc;
  if (p.mc > 0) plan.mc = p.mc;
  if (p.mc < 0) plan.mc = 0;
  if (p.nc > 0) {
    plan.nc = p.nc;
    plan.direct_b = false;
  }
  if (p.nc < 0) plan.direct_b = directBPossible(spec);
  if (p.nc == 0 && plan.mc == 0 && !plan.direct_b) plan.nc = static_cast<int>(plan.nr());
  if (p.k_unroll > 0) plan.k_unroll = p.k_unroll;
  if (p.prefetch > 0) plan.prefetch = p.prefetch;
  if (p.prefetch < 0) plan.prefetch = 0;
  if (p.threads > 0) plan.threads = p.threads;
  // Blocks in whole tiles.
  plan.nc = static_cast<int>(std::max<std::int64_t>(plan.nr(), plan.nc / plan.nr() * plan.nr()));
  if (plan.mc > 0) plan.mc = std::max(plan.mr, plan.mc / plan.mr * plan.mr);
  if (gateEpilogue(spec)) {
    // One tile row holds G vectors, one per column block (the same 16 columns of each), read from
    // the panels of a B block that spans every column; no software prefetch, no B read in place.
    plan.vectors = std::max(1, gateCount(spec));
    plan.direct_b = false;
    plan.prefetch = 0;
    const DimSpec& n = spec.inputs[1].dims[spec.inputs[1].rank - 1];
    plan.nc = static_cast<int>(
        std::max<std::int64_t>(plan.nr(), n.isStatic() ? (n.size + plan.nr() - 1) / plan.nr() * plan.nr() : plan.nr()));
  }
  // Pairs need both operands bfloat16 as they are (A read in place along K, B packed); by
  // default (bf16_dot = 0) only where they measured faster on this host.
  const OperandSpec& a = spec.inputs[0];
  plan.bf16_pairs = (p.bf16_dot > 0 || (p.bf16_dot == 0 && bf16PairsByDefault())) && targetHasBf16Dot(spec) &&
                    a.dtype == DType::BFloat16 && spec.inputs[1].dtype == DType::BFloat16 && a.contiguous &&
                    plan.mc == 0 && !plan.direct_b;
  return plan;
}

Status checkParams(const KernelParams& p) {
  if (p.vector_width != 0 || p.unroll != 0 || p.chunk != 0) {
    return makeError(ErrorCode::Unsupported, "matmul kernels take no vector_width/unroll/chunk parameters ({})",
                     p.toString());
  }
  // The tile as far as the parameters fix it (the family's defaults fill in the rest; see supports()).
  const int vectors = p.nr > 0 ? p.nr / static_cast<int>(kLanes) : 1;
  const int mr = p.mr > 0 ? p.mr : 1;
  if (p.mr < 0 || p.mr > 16 || p.nr < 0 || p.nr % static_cast<int>(kLanes) != 0 || p.nr > 64 ||
      mr * vectors > kMaxAccumulators) {
    return makeError(ErrorCode::Unsupported,
                     "matmul register tile {}x{} is not supported (mr <= 16, nr a multiple of 16 up to 64, "
                     "mr * nr / 16 <= {} accumulators)",
                     mr, vectors * static_cast<int>(kLanes), kMaxAccumulators);
  }
  if (p.kc < 0 || p.kc > 4096 || p.mc < -1 || p.mc > 4096 || p.nc < -1 || p.nc > 16384 || p.k_unroll < 0 ||
      p.k_unroll > 8 || p.prefetch < -1 || p.prefetch > 64 || p.threads < 0 || p.threads > 64 || p.bf16_dot < -1 ||
      p.bf16_dot > 1 || p.library < 0 || p.library > onednn::kMaxLibrary) {
    return makeError(ErrorCode::Unsupported, "matmul parameters out of range: {}", p.toString());
  }
  if (p.library != 0 && !(p == KernelParams{.library = p.library})) {
    return makeError(ErrorCode::Unsupported, "a matmul library kernel takes no other parameters ({})", p.toString());
  }
  return Status::ok();
}

// Bytes of scratch one task needs: the packed B block, then the packed A block.
std::int64_t bPackFloats(const Plan& plan) {
  return static_cast<std::int64_t>(plan.kc) * (plan.direct_b ? plan.nr() : plan.nc);
}
std::int64_t scratchBytes(const Plan& plan) {
  const std::int64_t a_floats = static_cast<std::int64_t>(plan.mc) * plan.kc;
  return (bPackFloats(plan) + a_floats) * 4 + 64;
}
// A 16-bit output keeps its partial sums between K blocks in float32, in the scratch after the
// packed blocks: M rows x NC columns (one N block at a time), not in C's own dtype.
bool widePartials(DType out_dtype) {
  return out_dtype != DType::Float32;
}

AlongN extraAlongN(const KernelSpec& spec, const OperandSpec& extra) {
  if (spec.inputs[1].rank < 2 || extra.rank == 0) return AlongN::Broadcast;
  const DimSpec& last = extra.dims[extra.rank - 1];
  if (!last.isStatic()) return AlongN::RunTime;
  return last.size == 1 ? AlongN::Broadcast : AlongN::Contiguous;
}

}  // namespace matmul

namespace {

using namespace matmul;

// ---- the runtime side: tasks and scratch ----

using PartFn = void (*)(const KernelArgs* args, std::int64_t task, std::int64_t tasks, void* scratch);

// A per-thread scratch buffer for the generated parts (threadBuffer, in 4 KiB steps).
struct MatmulScratchTag {};
void* threadScratch(std::int64_t bytes) {
  return ir::threadBuffer<MatmulScratchTag>(bytes, 4096);
}

// Called by every generated matmul kernel: runs part() for each task with its thread's scratch.
void runMatmulTasks(PartFn part, const KernelArgs* args, std::int64_t tasks, std::int64_t scratch_bytes) {
  if (tasks <= 1) {
    part(args, 0, 1, threadScratch(scratch_bytes));
    return;
  }
  ThreadPool::global().run(static_cast<int>(tasks),
                           [&](int task) { part(args, task, tasks, threadScratch(scratch_bytes)); });
}

// ---- the float32 B panel packer (PackBPanelFn, called by the generated kernels) ----

// Portable: column by column.
void packBColumnsPortable(const float* data, std::int64_t src, std::int64_t kc, std::int64_t count, float* dst,
                          std::int64_t stride, std::int64_t nr) {
  for (std::int64_t j = 0; j < nr; ++j) {
    const float* column = data + src + std::min(j, count - 1) * stride;
    for (std::int64_t p = 0; p < kc; ++p) dst[p * nr + j] = j < count ? column[p] : 0.0f;
  }
}

// AVX2: per 8 columns and 8 k, 8 loads down the columns and an 8 x 8 register transpose into 8
// packed rows; the last kc % 8 rows element by element. Columns past the count re-read the last
// one (in bounds) and are zeroed.
[[gnu::target("avx2")]] void packBColumnsAvx2(const float* data, std::int64_t src, std::int64_t kc, std::int64_t count,
                                              float* dst, std::int64_t stride, std::int64_t nr) {
  const std::int64_t k8 = kc & ~std::int64_t{7};
  const __m256 zero = _mm256_setzero_ps();
  for (std::int64_t j0 = 0; j0 < nr; j0 += 8) {
    float* group = dst + j0;
    const std::int64_t valid = std::clamp<std::int64_t>(count - j0, 0, 8);
    if (valid == 0) {
      for (std::int64_t p = 0; p < kc; ++p) _mm256_storeu_ps(group + p * nr, zero);
      continue;
    }
    const float* column[8];
    for (std::int64_t r = 0; r < 8; ++r) column[r] = data + src + (j0 + std::min(r, valid - 1)) * stride;
    const __m256 keep = _mm256_castsi256_ps(
        _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(valid)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
    for (std::int64_t p0 = 0; p0 < k8; p0 += 8) {
      __m256 r[8], t[8];
      for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(column[i] + p0);
      for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
      }
      for (int h = 0; h < 8; h += 4) {
        r[h] = _mm256_shuffle_ps(t[h], t[h + 2], 0x44);
        r[h + 1] = _mm256_shuffle_ps(t[h], t[h + 2], 0xEE);
        r[h + 2] = _mm256_shuffle_ps(t[h + 1], t[h + 3], 0x44);
        r[h + 3] = _mm256_shuffle_ps(t[h + 1], t[h + 3], 0xEE);
      }
      for (int i = 0; i < 4; ++i) {
        t[i] = _mm256_permute2f128_ps(r[i], r[i + 4], 0x20);
        t[i + 4] = _mm256_permute2f128_ps(r[i], r[i + 4], 0x31);
      }
      for (int i = 0; i < 8; ++i) _mm256_storeu_ps(group + (p0 + i) * nr, _mm256_and_ps(t[i], keep));
    }
    for (std::int64_t p = k8; p < kc; ++p) {
      for (std::int64_t c = 0; c < 8; ++c) group[p * nr + c] = c < valid ? column[c][p] : 0.0f;
    }
  }
}

// PackBPanelFn (matmul_plan.h): columns contiguous along K through the transposes, else row by row.
void packBPanel(const float* data, std::int64_t src, std::int64_t kc, std::int64_t count, float* dst,
                std::int64_t row_stride, std::int64_t col_stride, std::int64_t nr) {
  static const bool has_avx2 = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") != 0;
  }();
  if (row_stride == 1) {
    (has_avx2 ? &packBColumnsAvx2 : &packBColumnsPortable)(data, src, kc, count, dst, col_stride, nr);
    return;
  }
  for (std::int64_t p = 0; p < kc; ++p) {
    const float* row = data + src + p * row_stride;
    float* out = dst + p * nr;
    if (col_stride == 1) {
      std::copy(row, row + count, out);
    } else {
      for (std::int64_t j = 0; j < count; ++j) out[j] = row[j * col_stride];
    }
    std::fill(out + count, out + nr, 0.0f);
  }
}

// ---- prepare(): views of the operands ----

// The row/col view of one operand for prepare(): 1-D a is a row [1, K], 1-D b a column [K, 1].
struct MatrixView {
  std::int64_t rows, cols, row_stride, col_stride;
  Shape batch;
  Shape batch_strides;
};

MatrixView viewOf(const Tensor& t, bool is_left) {
  MatrixView view{};
  const int r = t.rank();
  if (r == 1) {
    if (is_left) {
      view = {1, t.dim(0), 0, t.stride(0), Shape{}, Shape{}};
    } else {
      view = {t.dim(0), 1, t.stride(0), 0, Shape{}, Shape{}};
    }
    return view;
  }
  view.rows = t.dim(r - 2);
  view.cols = t.dim(r - 1);
  view.row_stride = t.stride(r - 2);
  view.col_stride = t.stride(r - 1);
  for (int d = 0; d < r - 2; ++d) {
    view.batch.push_back(t.dim(d));
    view.batch_strides.push_back(t.stride(d));
  }
  return view;
}

Status checkFits(const OperandSpec& spec, const Tensor& x, const char* which) {
  bool fits = x.dtype() == spec.dtype && x.rank() == spec.rank && (!spec.contiguous || x.isContiguous());
  for (int d = 0; fits && d < x.rank(); ++d) fits = !spec.dims[d].isStatic() || spec.dims[d].size == x.dim(d);
  if (!fits) {
    return makeError(ErrorCode::Unsupported, "matmul: operand {} {} does not fit the kernel's spec {}", which,
                     x.describe(), spec.toString());
  }
  return Status::ok();
}

// ---- the family ----

class MatmulFamily final : public KernelFamily, public LlvmKernelEmitter {
 public:
  std::string_view name() const override { return "matmul"; }

  Status supports(const KernelSpec& spec) const override {
    if (spec.op != OpId::MatMul) return makeError(ErrorCode::Unsupported, "the matmul family compiles matmul only");
    if (spec.inputs.size() < 2 || !spec.inputs[0].is_tensor || !spec.inputs[1].is_tensor) {
      return makeError(ErrorCode::Unsupported, "matmul kernels take two tensor operands");
    }
    const OperandSpec& a = spec.inputs[0];
    const OperandSpec& b = spec.inputs[1];
    if (!isComputeFloat(a.dtype) || !isComputeFloat(b.dtype)) {
      return makeError(
          ErrorCode::Unsupported,
          "matmul kernels are compiled for float32/float16/bfloat16 operands only; {} x {} stays interpreted",
          dtypeName(a.dtype), dtypeName(b.dtype));
    }
    if (a.rank < 1 || b.rank < 1 || a.rank > kMaxBatchRank + 2 || b.rank > kMaxBatchRank + 2) {
      return makeError(ErrorCode::Unsupported, "matmul kernels take operands of rank 1..{}, got {} and {}",
                       kMaxBatchRank + 2, a.rank, b.rank);
    }
    const std::int64_t ka = a.dims[a.rank - 1].size;
    const DimSpec& kb_dim = b.dims[b.rank == 1 ? 0 : b.rank - 2];
    if (ka >= 0 && kb_dim.isStatic() && ka != kb_dim.size) {
      return makeError(ErrorCode::ShapeMismatch, "matmul contracting dims differ: {} vs {}", ka, kb_dim.size);
    }
    SVM_RETURN_IF_ERROR(checkParams(spec.params));
    if (spec.params.library != 0) {
      // A oneDNN primitive (library_onednn.h): whether oneDNN can create it is known at compile.
      if (!onednn::available()) {
        return makeError(ErrorCode::Unsupported, "matmul library kernels are off (LibraryCandidates=0)");
      }
      SVM_RETURN_IF_ERROR(onednn::expressible(spec));
      return supportsEpilogue(spec);
    }
    const Plan plan = resolvePlan(spec);
    if (spec.params.bf16_dot > 0 && !plan.bf16_pairs) {
      return makeError(ErrorCode::Unsupported,
                       "matmul bf16dot=1 needs bfloat16 A and B, A contiguous and read in place (no mc), B packed, "
                       "and a CPU with AVX512_BF16; got {} x {} ({})",
                       dtypeName(spec.inputs[0].dtype), dtypeName(spec.inputs[1].dtype), spec.params.toString());
    }
    if (plan.mr * plan.vectors > kMaxAccumulators) {
      return makeError(ErrorCode::Unsupported, "matmul register tile {}x{} needs more than {} accumulators", plan.mr,
                       plan.nr(), kMaxAccumulators);
    }
    return supportsEpilogue(spec);
  }

  Status outputs(const KernelSpec& spec, std::span<const Value* const> inputs, std::span<DType> dtypes,
                 std::span<Shape> shapes) const override {
    SVM_ASSIGN_OR_RETURN(Geometry g, geometry(spec, inputs));
    if (gateEpilogue(spec)) {
      SVM_ASSIGN_OR_RETURN(Shape iteration, gateIteration(spec, inputs, g));
      for (std::size_t o = 0; o < spec.fused->outputs.size(); ++o) {
        dtypes[o] = spec.fused->dtype;
        shapes[o] = iteration;
      }
      return Status::ok();
    }
    dtypes[0] = promoteTypes(g.a->dtype(), g.b->dtype());
    shapes[0] = g.out;
    return Status::ok();
  }

  Status prepare(const KernelSpec& spec, std::span<const Value* const> inputs, std::span<const Tensor> outputs,
                 KernelArgs& args) const override {
    SVM_ASSIGN_OR_RETURN(Geometry g, geometry(spec, inputs));
    if (gateEpilogue(spec)) {
      SVM_ASSIGN_OR_RETURN(Shape iteration, gateIteration(spec, inputs, g));
      for (const Tensor& out : outputs) {
        if (out.shape() != iteration || (iteration[iteration.rank() - 1] > 1 && out.stride(out.rank() - 1) != 1)) {
          return makeError(ErrorCode::Unsupported, "matmul gate epilogue: output {} is not dense along H",
                           out.describe());
        }
      }
    }
    // Canonical [batch0, batch1, rows, cols] views; batch dims right-aligned, stride 0 where broadcast.
    const int nb = g.batch.rank();
    const MatrixView* views[2] = {&g.left, &g.right};
    const int slots[2] = {slotA(spec), slotB(spec)};
    for (int o = 0; o < 2; ++o) {
      const MatrixView& view = *views[o];
      std::int64_t* shape = args.shape[slots[o]];
      std::int64_t* strides = args.strides[slots[o]];
      const int lead = nb - view.batch.rank();
      for (int d = 0; d < kMaxBatchRank; ++d) {
        const int out_axis = d - (kMaxBatchRank - nb);  // axis in the broadcast batch shape
        shape[d] = out_axis >= 0 ? g.batch[out_axis] : 1;
        const int own = out_axis - lead;  // axis in this operand's batch shape
        strides[d] = own >= 0 && view.batch[own] != 1 ? view.batch_strides[own] : 0;
      }
      shape[2] = view.rows;
      shape[3] = view.cols;
      strides[2] = view.row_stride;
      strides[3] = view.col_stride;
    }
    // Epilogue operands: strides over the output's canonical axes (0 where broadcast).
    const int out_rank = g.out.rank();
    int canonical[kMaxRank];  // output axis -> canonical axis
    for (int d = 0; d < nb; ++d) canonical[d] = kMaxBatchRank - nb + d;
    int axis = nb;
    if (g.a->rank() >= 2) canonical[axis++] = 2;
    if (g.b->rank() >= 2) canonical[axis++] = 3;
    for (std::size_t e = 2; e < epilogueInputsEnd(spec); ++e) {
      const Tensor& x = inputs[e]->tensor();
      std::int64_t* strides = args.strides[e];
      std::int64_t own[4] = {0, 0, 0, 0};
      for (int d = 0; d < x.rank(); ++d) {
        const int out_axis = out_rank - x.rank() + d;
        if (x.dim(d) != 1) own[canonical[out_axis]] = x.stride(d);
      }
      // Along N the kernel assumes stride 1 (vector loads) or 0 (a broadcast scalar).
      const AlongN along_n = extraAlongN(spec, spec.inputs[e]);
      const bool fits = along_n == AlongN::Broadcast || g.right.cols <= 1 || own[3] == 1 ||
                        (along_n == AlongN::RunTime && own[3] == 0);
      if (!fits) {
        return makeError(ErrorCode::Unsupported, "matmul epilogue operand {} is not contiguous along N",
                         x.describe());
      }
      for (int d = 0; d < 4; ++d) strides[d] = own[d];
    }
    const Plan plan = resolvePlan(spec);
    const std::int64_t threads = plan.threads > 0 ? plan.threads : kernelThreads();
    std::int64_t batches = 1;
    for (int d = 0; d < nb; ++d) batches *= g.batch[d];
    const std::int64_t work = batches * g.left.rows * g.left.cols * g.right.cols;
    const std::int64_t b_bytes = g.right.rows * g.right.cols * static_cast<std::int64_t>(g.b->itemSize());
    const bool parallel = work >= kMinParallelWork || (work >= kMinParallelWork / 8 && b_bytes >= kMinParallelBytesOfB);
    args.scalars[kScalarRunner] = static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(&runMatmulTasks));
    args.scalars[kScalarTasks] = parallel ? std::max<std::int64_t>(1, threads) : 1;
    args.data[slotB(spec)] = reinterpret_cast<void*>(reinterpret_cast<std::uintptr_t>(&packBPanel));
    if (spec.params.library != 0) {
      args.scalars[kScalarRunner] =
          static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(&onednn::runLibraryMatmul));
      return onednn::prepareCall(spec, args);
    }
    return Status::ok();
  }

  // A gate epilogue: the product with its epilogue (the family's default reference), then the
  // program (the fused family's reference) on column block g of it viewed at the iteration shape.
  Status reference(const KernelSpec& spec, std::span<const Value* const> inputs,
                   std::span<Value> outputs) const override {
    if (!gateEpilogue(spec)) return KernelFamily::reference(spec, inputs, outputs);
    SVM_ASSIGN_OR_RETURN(Geometry g, geometry(spec, inputs));
    SVM_ASSIGN_OR_RETURN(Shape iteration, gateIteration(spec, inputs, g));
    KernelSpec product_spec = spec;
    product_spec.fused = nullptr;
    product_spec.fused_leaf_source.clear();
    product_spec.inputs.resize(epilogueInputsEnd(spec));
    std::vector<Value> product(1);
    SVM_RETURN_IF_ERROR(KernelFamily::reference(product_spec, inputs.first(epilogueInputsEnd(spec)), product));
    const Tensor& c = product[0].tensor();
    const std::int64_t hidden = iteration[iteration.rank() - 1];
    Shape strides = iteration.rank() == 2 ? Shape{c.stride(0), c.stride(1)}
                                          : Shape{iteration[1] * c.stride(0), c.stride(0), c.stride(1)};
    std::vector<Value> blocks;
    for (int gate = 0; gate < gateCount(spec); ++gate) {
      SVM_ASSIGN_OR_RETURN(Tensor view, c.asStrided(iteration, strides, c.offset() + gate * hidden * c.stride(1)));
      blocks.push_back(Value::fromTensor(std::move(view)));
    }
    KernelSpec program_spec;
    program_spec.fused = spec.fused;
    std::vector<const Value*> leaves;
    for (int source : spec.fused_leaf_source) {
      leaves.push_back(source < 0 ? &blocks[static_cast<std::size_t>(-source - 1)]
                                  : inputs[static_cast<std::size_t>(source)]);
      OperandSpec operand;
      operand.dtype = leaves.back()->tensor().dtype();
      operand.rank = leaves.back()->tensor().rank();
      program_spec.inputs.push_back(operand);
    }
    return fusedFamily()->reference(program_spec, leaves, outputs);
  }

  // B, when the kernel would pack it (a 2-D B, not read in place, not the dot-product path); a
  // library kernel's B in the layout its oneDNN primitive chose (onednn::packedB).
  PackedOperand packedOperand(const KernelSpec& spec, const KernelArgs& args) const override {
    if (spec.params.library != 0) return onednn::packedB(spec, args);
    const Plan plan = resolvePlan(spec);
    if (spec.inputs.size() < 2 || !packableB(spec, plan)) return {};
    const int sa = slotA(spec), sb = slotB(spec);
    const std::int64_t m = args.shape[sa][2], k = args.shape[sb][2], n = args.shape[sb][3];
    // The dot-product path reads B in place (the strides as matrixStrides() bakes them in).
    const std::int64_t a_col = spec.inputs[0].contiguous ? 1 : args.strides[sa][3];
    const std::int64_t b_row = spec.inputs[1].contiguous ? n : args.strides[sb][2];
    if (a_col == 1 && b_row == 1 && (m < plan.mr || n < static_cast<std::int64_t>(kLanes))) return {};
    const std::int64_t n_pad = (n + plan.nr() - 1) / plan.nr() * plan.nr();
    return {1, k * n_pad * static_cast<std::int64_t>(sizeof(float))};
  }

  void usePacked(const KernelSpec& spec, KernelArgs& args, void* buffer, PackMode mode) const override {
    if (spec.params.library != 0) return onednn::usePackedB(args, buffer, mode);
    args.scalars[kScalarPackedB] = static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(buffer));
    args.scalars[kScalarPackOnly] = mode == PackMode::PackOnly ? 1 : 0;
  }

  Status emit(const KernelSpec& spec, llvm::Module& module, const std::string& symbol) const override {
    SVM_RETURN_IF_ERROR(supports(spec));
    // A library kernel's primitive is created here for static shapes: compile time, and a
    // primitive oneDNN cannot create fails the compile (the generated kernel is used instead).
    if (spec.params.library != 0) SVM_RETURN_IF_ERROR(onednn::createFor(spec));
    return emitMatmulKernel(spec, module, symbol);
  }

  // e.g. "matmul_f32_Mdyn_K128_N1024", "matmul_bf16_b2_M17_K9_N11_Bstrided", "matmul_f32f16_Mvec_K9_Ndyn",
  // "matmul_f32_M32_K768_N4096_mr8_nr32_kc512", "matmul_f32_M7_K9_N11_Add2_Sigmoid".
  std::string symbolStem(const KernelSpec& spec) const override {
    if (spec.op != OpId::MatMul || spec.inputs.size() < 2) return KernelFamily::symbolStem(spec);
    const OperandSpec& a = spec.inputs[0];
    const OperandSpec& b = spec.inputs[1];
    std::string stem = fmt::format("matmul_{}", dtypeShortName(a.dtype));
    if (b.dtype != a.dtype) stem += dtypeShortName(b.dtype);
    const int batch_rank = std::max(a.rank, b.rank) - 2;
    if (batch_rank > 0) stem += fmt::format("_b{}", batch_rank);
    const MatmulDims dims = staticDims(spec);
    auto text = [](std::int64_t v) { return v >= 0 ? std::to_string(v) : std::string("dyn"); };
    stem += "_M" + (a.rank == 1 ? std::string("vec") : text(dims.m));
    stem += "_K" + text(dims.k);
    stem += "_N" + (b.rank == 1 ? std::string("vec") : text(dims.n));
    if (!a.contiguous) stem += "_Astrided";
    if (!b.contiguous) stem += "_Bstrided";
    // A library kernel has no bf16 variant: the host's verdict must not rename it (a cached one
    // was dropped as defining another symbol once the verdict turned).
    if (spec.params.library == 0 && resolvePlan(spec).bf16_pairs) stem += "_bf16pairs";
    for (const EpilogueStep& step : spec.epilogue) {
      stem += fmt::format("_{}{}{}", step.swapped ? "r" : "", opIdent(step.op),
                          step.operand >= 0 ? std::to_string(step.operand) : std::string());
    }
    if (gateEpilogue(spec)) stem += fmt::format("_gates{}_{}ops", gateCount(spec), spec.fused->nodes.size());
    if (spec.params.library != 0) {
      stem += onednn::symbolSuffix(spec.params);
    } else if (!spec.params.isDefault()) {
      stem += '_';
      for (char c : spec.params.toString()) {
        if (c == ' ') {
          stem += '_';
        } else if (c == '-') {
          stem += 'm';
        } else if (c != '=') {
          stem += c;
        }
      }
    }
    return stem;
  }

  // Register tiles x blocking for this shape; the default (KernelParams{}) first.
  std::vector<KernelParams> searchSpace(const KernelSpec& spec) const override {
    std::vector<KernelParams> space = {KernelParams{}};
    const KernelTarget& target = targetOf(spec);
    // Tiles whose accumulators take between half and all but four of the target's vector
    // registers (the rest hold B vectors and A broadcasts): 16..28 zmm on AVX-512, 8..12 ymm on
    // AVX2 (16 ymm, each <16 x float> accumulator two of them).
    const int max_registers = target.vector_registers - 4;
    auto fits = [&](int mr, int nr) {
      const int registers = accumulatorRegisters(target, mr, nr);
      return registers >= target.vector_registers / 2 && registers <= max_registers;
    };
    if (gateEpilogue(spec)) {
      // The tile's width is the blocks' count: its rows and the K block only.
      const int nr = gateCount(spec) * static_cast<int>(kLanes);
      for (int mr : {4, 6, 8}) {
        for (int kc : {128, 256}) {
          KernelParams p{.mr = mr, .nr = nr, .kc = kc};
          if (mr * nr / static_cast<int>(kLanes) <= kMaxAccumulators &&
              accumulatorRegisters(target, mr, nr) <= max_registers &&
              std::find(space.begin(), space.end(), p) == space.end()) {
            space.push_back(p);
          }
        }
      }
      for (const KernelParams& p : onednn::candidates(spec)) space.push_back(p);  // with a tail
      return space;
    }
    // oneDNN's primitive where its post-ops express the epilogue, else the primitive and a
    // generated tail (LibraryCandidates=1), right after the default so a tuning budget always
    // reaches it: timed like the generated kernels; one oneDNN cannot create on this CPU fails to
    // compile.
    for (const KernelParams& p : onednn::candidates(spec)) space.push_back(p);
    const MatmulDims dims = staticDims(spec);
    const bool direct = directBPossible(spec);
    const bool small_m = dims.m >= 0 && dims.m <= 64;
    const CacheModel caches = cacheModel(target);
    struct Tile {
      int mr, nr;
    };
    // AVX-512 tiles first, then AVX2 ones; fits() keeps those of the target's register budget
    // (an AVX2 target has none of the 16-lane-register tiles).
    const Tile tiles[] = {{8, 32}, {6, 64}, {4, 64}, {12, 32}, {14, 32}, {8, 48}, {4, 16}, {6, 16}, {2, 32}, {3, 32}};
    auto add = [&](KernelParams p) {
      if (checkParams(p).isOk() && std::find(space.begin(), space.end(), p) == space.end()) space.push_back(p);
    };
    for (const Tile& t : tiles) {
      if (!fits(t.mr, t.nr)) continue;
      // K blocks from the caches (see kcForL1 / kcForL2): the packed B panel streamed from L2
      // with the next one prefetched, and the panel with A's rows kept in L1.
      const int kc_l2 = kcForL2(caches, t.nr);
      const int kc_l1 = kcForL1(caches, t.mr, t.nr);
      // Packed B one panel at a time, with and without prefetching the next panel's rows.
      add({.mr = t.mr, .nr = t.nr, .kc = kc_l2, .nc = t.nr, .prefetch = 1});
      add({.mr = t.mr, .nr = t.nr, .kc = kc_l1, .nc = t.nr, .prefetch = -1});
      if (!small_m) add({.mr = t.mr, .nr = t.nr, .kc = 2 * kc_l2, .nc = t.nr, .prefetch = 1});
      // K unrolled 4x only with accumulators in up to half the registers: with 24-28 zmm, the
      // unrolled steps' loads are scheduled ahead and spill (12 x 32, 14 x 32, 8 x 48 ran
      // 1.6-2.7x slower at 256^3).
      if (accumulatorRegisters(target, t.mr, t.nr) <= target.vector_registers / 2)
        add({.mr = t.mr, .nr = t.nr, .kc = kc_l2, .nc = t.nr, .k_unroll = 4, .prefetch = 1});
      if (small_m && direct) {
        // B read in place, K blocks of 8 or 16 rows: as many sequential streams through B's
        // rows, which the hardware prefetcher follows (M of 1..8: 1.3-1.5x packed panels).
        add({.mr = t.mr, .nr = t.nr, .kc = 8, .nc = -1, .prefetch = -1});
        add({.mr = t.mr, .nr = t.nr, .kc = 16, .nc = -1, .prefetch = -1});
        add({.mr = t.mr, .nr = t.nr, .kc = kc_l1, .nc = t.nr, .prefetch = 1});
      } else {
        // Packed A and B blocks (BLIS): the A block in a quarter or half of L2, the B block in a
        // quarter or half of this CPU's L3 share.
        add({.mr = t.mr,
             .nr = t.nr,
             .mc = mcForL2(caches, t.mr, kc_l2, 4),
             .kc = kc_l2,
             .nc = ncForL3(caches, t.nr, kc_l2, 4),
             .prefetch = -1});
        add({.mr = t.mr,
             .nr = t.nr,
             .mc = mcForL2(caches, t.mr, kc_l1, 2),
             .kc = kc_l1,
             .nc = ncForL3(caches, t.nr, kc_l1, 2),
             .prefetch = -1});
        // ...and few rows of A per B block (mcForL1: the C rows of one panel in a quarter of L1),
        // all of its panels in turn (the one-K-block default, see defaultPlan).
        add({.mr = t.mr,
             .nr = t.nr,
             .mc = mcForL1(caches, t.mr, t.nr),
             .kc = kc_l1,
             .nc = ncForL3(caches, t.nr, kc_l1, 4),
             .prefetch = -1});
      }
    }
    // bfloat16 x bfloat16: the default tile in the other variant as well (pairs <-> widening), so
    // the tuner measures which one this CPU runs faster at this shape (jit/bf16_variant.h).
    KernelSpec pairs = spec;
    pairs.params = KernelParams{.bf16_dot = 1};
    if (resolvePlan(pairs).bf16_pairs) add({.bf16_dot = resolvePlan(spec).bf16_pairs ? -1 : 1});
    return space;
  }

 private:
  struct Geometry {
    const Tensor* a;
    const Tensor* b;
    MatrixView left, right;
    Shape batch;
    Shape out;
  };

  static Status supportsEpilogue(const KernelSpec& spec) {
    const DType out = promoteTypes(spec.inputs[0].dtype, spec.inputs[1].dtype);
    std::vector<bool> used(spec.inputs.size(), false);
    for (const EpilogueStep& step : spec.epilogue) {
      if (step.operand < 0) {
        if (!isEpilogueUnary(step.op)) {
          return makeError(ErrorCode::Unsupported, "matmul epilogue: {} is not a fusable unary op", opIdent(step.op));
        }
        continue;
      }
      if (!isEpilogueBinary(step.op)) {
        return makeError(ErrorCode::Unsupported, "matmul epilogue: {} is not a fusable binary op", opIdent(step.op));
      }
      if (step.operand < 2 || static_cast<std::size_t>(step.operand) >= spec.inputs.size()) {
        return makeError(ErrorCode::Unsupported, "matmul epilogue operand {} out of range", step.operand);
      }
      const OperandSpec& extra = spec.inputs[static_cast<std::size_t>(step.operand)];
      if (!extra.is_tensor || extra.dtype != out || extra.rank > kMaxBatchRank + 2) {
        return makeError(ErrorCode::Unsupported,
                         "matmul epilogue operand {} must be a tensor of the output dtype {} (rank <= 4)",
                         extra.toString(), dtypeName(out));
      }
      used[static_cast<std::size_t>(step.operand)] = true;
    }
    for (std::size_t e = 2; e < epilogueInputsEnd(spec); ++e) {
      if (!used[e]) return makeError(ErrorCode::Unsupported, "matmul input {} is not used by the epilogue", e);
    }
    if (spec.inputs.size() + static_cast<std::size_t>(outputCount(spec)) + 2 >
        static_cast<std::size_t>(kMaxKernelOperands)) {
      return makeError(ErrorCode::Unsupported, "matmul epilogue has too many operands");
    }
    return gateEpilogue(spec) ? supportsGates(spec) : Status::ok();
  }

  // A gate epilogue: two 2-D operands, N static and G blocks of H (a multiple of 16) wide, a
  // program of rank 2 or 3 over [rows..., H] in the product's dtype whose nodes the epilogue can
  // compute on vectors, every block 0..G-1 read, at least one leaf view (it gives the iteration
  // shape) whose stride along H is 0 or 1.
  static Status supportsGates(const KernelSpec& spec) {
    const FusedProgram& program = *spec.fused;
    const OperandSpec& a = spec.inputs[0];
    const OperandSpec& b = spec.inputs[1];
    const DType out = promoteTypes(a.dtype, b.dtype);
    const int gates = gateCount(spec);
    const std::int64_t n = b.rank == 2 ? b.dims[1].size : -1;
    auto no = [&](std::string_view why) {
      return makeError(ErrorCode::Unsupported, "matmul gate epilogue: {} ({})", why, spec.signature());
    };
    if (a.rank != 2 || b.rank != 2) return no("needs 2-D operands");
    if (gates < 1 || gates > 4 || n < 0 || n % gates != 0 || (n / gates) % static_cast<std::int64_t>(kLanes) != 0) {
      return no("needs a static N of 1..4 column blocks, each a multiple of 16 wide");
    }
    if (program.reduce != FusedProgram::Reduce::None || !program.in_place.empty() || program.rank < 2 ||
        program.rank > 3 || program.dtype != out || program.outputs.empty()) {
      return no("needs an elementwise program of rank 2 or 3 in the product's dtype");
    }
    if (spec.fused_leaf_source.size() != static_cast<std::size_t>(program.numLeaves())) return no("leaf sources");
    std::vector<bool> read(static_cast<std::size_t>(gates), false);
    bool has_view = false;
    for (int l = 0; l < program.numLeaves(); ++l) {
      const int source = spec.fused_leaf_source[static_cast<std::size_t>(l)];
      if (source < 0) {
        read[static_cast<std::size_t>(-source - 1)] = true;
        continue;
      }
      if (static_cast<std::size_t>(source) < epilogueInputsEnd(spec) ||
          static_cast<std::size_t>(source) >= spec.inputs.size() ||
          spec.inputs[static_cast<std::size_t>(source)].rank != program.rank) {
        return no("a leaf view is not an input of the iteration's rank after the epilogue's");
      }
      const int inner = program.leaf_inner[static_cast<std::size_t>(l)];
      if (inner != 0 && inner != 1) return no("a leaf view's stride along H is neither 0 nor 1");
      has_view = true;
    }
    if (!has_view || std::find(read.begin(), read.end(), false) != read.end()) {
      return no("needs every column block and at least one leaf view");
    }
    for (const FusedProgram::Node& node : program.nodes) {
      if (!node.constant && !isEpilogueUnary(node.op) && !isEpilogueBinary(node.op)) {
        return no(fmt::format("{} is not computed on vectors", opIdent(node.op)));
      }
    }
    const KernelParams& params = spec.params;
    if ((params.nr != 0 && params.nr != gates * static_cast<int>(kLanes)) || params.nc != 0 || params.prefetch > 0) {
      return no("takes no nr, nc or prefetch parameters");
    }
    return Status::ok();
  }

  static Expected<Geometry> geometry(const KernelSpec& spec, std::span<const Value* const> inputs) {
    if (spec.inputs.size() < 2 || inputs.size() != spec.inputs.size()) {
      return makeError(ErrorCode::Unsupported, "matmul kernel takes {} operands, got {}", spec.inputs.size(),
                       inputs.size());
    }
    for (const Value* v : inputs) {
      if (v == nullptr || !v->isTensor()) return makeError(ErrorCode::Unsupported, "matmul kernels take tensor operands");
    }
    Geometry g{&inputs[0]->tensor(), &inputs[1]->tensor(), {}, {}, {}, {}};
    SVM_RETURN_IF_ERROR(checkFits(spec.inputs[0], *g.a, "a"));
    SVM_RETURN_IF_ERROR(checkFits(spec.inputs[1], *g.b, "b"));
    g.left = viewOf(*g.a, true);
    g.right = viewOf(*g.b, false);
    if (g.left.cols != g.right.rows) {
      return makeError(ErrorCode::ShapeMismatch, "matmul contracting dims differ: {} vs {}", g.left.cols, g.right.rows);
    }
    SVM_ASSIGN_OR_RETURN(g.batch, broadcastShapes(g.left.batch, g.right.batch));
    if (g.batch.rank() > kMaxBatchRank) return makeError(ErrorCode::Unsupported, "matmul: too many batch dims");
    g.out = g.batch;
    if (g.a->rank() >= 2) g.out.push_back(g.left.rows);
    if (g.b->rank() >= 2) g.out.push_back(g.right.cols);
    // Epilogue operands broadcast to the output, never the other way round.
    for (std::size_t e = 2; e < epilogueInputsEnd(spec); ++e) {
      const Tensor& x = inputs[e]->tensor();
      SVM_RETURN_IF_ERROR(checkFits(spec.inputs[e], x, "epilogue"));
      bool fits = x.rank() <= g.out.rank();
      for (int d = 0; fits && d < x.rank(); ++d) {
        const std::int64_t want = g.out[g.out.rank() - x.rank() + d];
        fits = x.dim(d) == want || x.dim(d) == 1;
      }
      if (!fits) {
        return makeError(ErrorCode::ShapeMismatch, "matmul epilogue operand {} does not broadcast to the output {}",
                         x.describe(), g.out.toString());
      }
    }
    return g;
  }

  // A gate epilogue's iteration shape (its leaf views'): [rows..., H] with the leading axes'
  // product the product's rows and every leaf view's stride along H as the kernel was built for.
  static Expected<Shape> gateIteration(const KernelSpec& spec, std::span<const Value* const> inputs,
                                       const Geometry& g) {
    const FusedProgram& program = *spec.fused;
    Shape iteration;
    for (int l = 0; l < program.numLeaves(); ++l) {
      const int source = spec.fused_leaf_source[static_cast<std::size_t>(l)];
      if (source < 0) continue;
      const Tensor& view = inputs[static_cast<std::size_t>(source)]->tensor();
      if (iteration.rank() == 0) iteration = view.shape();
      const int inner = program.leaf_inner[static_cast<std::size_t>(l)];
      const std::int64_t stride = view.rank() == 0 ? 0 : view.stride(view.rank() - 1);
      if (view.shape() != iteration || (iteration[iteration.rank() - 1] > 1 && stride != inner)) {
        return makeError(ErrorCode::Unsupported,
                         "matmul gate epilogue: leaf view {} does not fit the kernel (iteration {}, stride along H {})",
                         view.describe(), iteration.toString(), inner);
      }
    }
    const std::int64_t gates = gateCount(spec);
    std::int64_t rows = 1;
    for (int d = 0; d + 1 < iteration.rank(); ++d) rows *= iteration[d];
    if (iteration.rank() != program.rank || rows != g.left.rows ||
        iteration[iteration.rank() - 1] * gates != g.right.cols) {
      return makeError(ErrorCode::ShapeMismatch,
                       "matmul gate epilogue: iteration {} does not match the product [{}, {}] in {} blocks",
                       iteration.toString(), g.left.rows, g.right.cols, gates);
    }
    return iteration;
  }
};

}  // namespace

const KernelFamily* matmulFamily(OpId op) {
  static const MatmulFamily family;
  return op == OpId::MatMul ? &family : nullptr;
}

}  // namespace shapevm::jit
