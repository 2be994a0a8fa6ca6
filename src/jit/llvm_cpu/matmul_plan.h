// SPDX-License-Identifier: Apache-2.0
// The matmul family's shared pieces (internal to codegen_matmul.cc, the family, and
// matmul_emitter.cc, the IR): its constants, the Plan (KernelParams resolved against the shape
// and the target CPU), the operand layout helpers, and the emitter's entry point. See the top of
// codegen_matmul.cc for the loop nest and the packed layouts. Invariant: the family and the
// emitter see one resolvePlan(); the packed B layout and the scratch size derive from it only.
#pragma once

#include <cstdint>
#include <string>

#include "jit/kernel_abi.h"
#include "jit/llvm_cpu/codegen_util.h"

namespace shapevm::jit::matmul {

using ir::Builder;

constexpr unsigned kLanes = 16;  // <16 x float>
constexpr int kMaxBatchRank = 2;
constexpr int kMaxAccumulators = 28;  // of 32 zmm registers: the rest hold B and A values
// scalars[] written by prepare(): the task runner's address and the number of tasks.
constexpr int kScalarRunner = 0;
constexpr int kScalarTasks = 1;
// scalars[] written by usePacked(): the whole packed B (0: none, pack into the scratch as usual),
// and 1 = only write that packing.
constexpr int kScalarPackedB = 2;
constexpr int kScalarPackOnly = 3;
// A library kernel (KernelParams::library, library_onednn.h) packs nothing: that slot holds its
// oneDNN primitive, and scalars[kScalarRunner] the library runner.
constexpr int kScalarLibrary = kScalarPackedB;
// Below this many multiply-adds a call stays on one thread (waking workers costs ~10 us)...
constexpr std::int64_t kMinParallelWork = std::int64_t{1} << 20;
// ...unless it has an eighth of that and a B this large: a few rows against a big weight (a
// recurrent step at batch 1) are bound by reading B, and two cores read it twice as fast, each
// half staying in its own L2 (the loop at batch 1, 2 threads: 2.29 -> 1.79-1.83 ms per 100 steps).
constexpr std::int64_t kMinParallelBytesOfB = std::int64_t{256} << 10;

// The packer of one float32 B panel of `nr` columns whose layout is known only at run time (a
// strided B, e.g. x @ W.T): dst[p * nr + j] = data[src + p * row_stride + j * col_stride] for p <
// kc, j < count; 0 for count <= j < nr. Compiled C++ (codegen_matmul.cc: rows copied, columns
// contiguous along K through 8 x 8 register transposes, anything else element by element), not
// generated: prepare() puts its address in B's canonical view slot (args.data[slotB], otherwise
// unused) and the kernels call it from there, so no kernel carries its own packers (they were half
// the machine code time of an x @ W.T kernel).
using PackBPanelFn = void (*)(const float* data, std::int64_t src, std::int64_t kc, std::int64_t count, float* dst,
                              std::int64_t row_stride, std::int64_t col_stride, std::int64_t nr);

// What the spec fixes about the matrices: -1 = known only at run time.
struct MatmulDims {
  std::int64_t m = -1, k = -1, n = -1;
};

// Every knob of the generated code. B is packed in KC x NC blocks (panels of NR columns), A in
// MC x KC blocks (panels of MR rows) when mc > 0; direct_b reads B in place (f32 rows only).
struct Plan {
  int mr = 8;       // register tile rows
  int vectors = 2;  // register tile columns / 16 (NR = 16 * vectors)
  int kc = 256;     // K block
  int mc = 0;       // M block of packed A; 0 = A read in place
  int nc = 32;      // N block of packed B (multiple of NR)
  bool direct_b = false;
  int k_unroll = 1;
  int prefetch = 0;  // > 0: prefetch B (in place: this many k steps ahead; packed: the next panel)
  int threads = 0;   // 0 = the KernelThreads tunable at run time
  // bfloat16 A and B: packed B holds pairs of K rows (one 32-bit slot: B[2p, j] low, B[2p+1, j]
  // high; zero past K) and the tile runs one vdpbf16ps per pair, half the steps of widening.
  bool bf16_pairs = false;
  std::int64_t nr() const { return static_cast<std::int64_t>(vectors) * kLanes; }
};

// The caches the blocking is sized for (KernelTarget's, from the backend's CostHints; unknown
// ones: support/cpu_caches.h's fallbacks), bytes.
struct CacheModel {
  std::int64_t l1 = 0, l2 = 0, l3 = 0;  // L1d, L2, this CPU's share of the L3
};
CacheModel cacheModel(const KernelTarget& target);
constexpr int kMinModelKc = 64, kMaxModelKc = 512;                     // K blocks the model picks (powers of two)
constexpr int kMaxModelMc = 1024;                                      // packed A rows at most
constexpr std::int64_t kMaxPackedBBlockBytes = std::int64_t{4} << 20;  // one task's packed B block
// K block (power of two in [64, 512]) whose mr A rows read in place and kc x nr packed B panel
// fit L1 together.
int kcForL1(const CacheModel& caches, int mr, int nr);
// K block whose packed B panel streams from L2 with the next one prefetched: two panels in an
// eighth of L2 (the rest for A's rows, C and the hardware's own prefetches).
int kcForL2(const CacheModel& caches, int nr);
// The same for packed A and B blocks (A from its packed block, not its rows): two panels in a
// quarter of L2.
int kcForL2Blocks(const CacheModel& caches, int nr);
// Packed A block rows: mc x kc floats in 1/share of L2, whole tiles, mr..1024.
int mcForL2(const CacheModel& caches, int mr, int kc, int share);
// Packed A block rows whose C rows of one panel (mc x nr floats) fill a quarter of L1, whole
// tiles, mr..1024: the row block when all of K is one K block (see defaultPlan).
int mcForL1(const CacheModel& caches, int mr, int nr);
// Packed B block columns: kc x nc floats in 1/share of the L3 share (at most 4 MiB), whole panels.
int ncForL3(const CacheModel& caches, int nr, int kc, int share);

// A gate epilogue (KernelSpec::fused on a matmul, see kernel_abi.h): the program's leaf views
// are the spec inputs from epilogueInputsEnd() on; the kernel's outputs are the program's.
bool gateEpilogue(const KernelSpec& spec);
std::size_t epilogueInputsEnd(const KernelSpec& spec);
// G: the product's column blocks the program reads (one accumulator vector each per tile row).
int gateCount(const KernelSpec& spec);
int outputCount(const KernelSpec& spec);
// Canonical view slots: right after the operands (inputs, then the outputs).
int slotA(const KernelSpec& spec);
int slotB(const KernelSpec& spec);
bool targetHasAvx512(const KernelSpec& spec);   // the spec's target (KernelSpec::target) has AVX-512
bool targetHasBf16Dot(const KernelSpec& spec);  // vdpbf16ps: 16 float32 lanes += 16 bf16 pair products
// The default (KernelParams::bf16_dot = 0) variant on this host: pairs unless widening measured faster.
bool bf16PairsByDefault();
bool isEpilogueUnary(OpId op);
bool isEpilogueBinary(OpId op);
MatmulDims staticDims(const KernelSpec& spec);
bool directBPossible(const KernelSpec& spec);              // B read in place: float32, contiguous rows
bool packableB(const KernelSpec& spec, const Plan& plan);  // the whole B may come packed
Plan resolvePlan(const KernelSpec& spec);
std::int64_t bPackFloats(const Plan& plan);   // the packed B block's floats in the scratch
std::int64_t scratchBytes(const Plan& plan);  // one task's scratch (packed blocks), bytes
// A 16-bit output keeps its partial sums between K blocks in float32 (see the emitter).
bool widePartials(DType out_dtype);

// How an epilogue operand varies along N: not at all (the output has no N axis, or the operand's
// dim aligned with N is statically 1: one value per row), with stride 1 (lanes loaded as
// vectors), or as the run-time stride says (0 or 1; a dynamic dim that may be 1).
enum class AlongN { Broadcast, Contiguous, RunTime };
AlongN extraAlongN(const KernelSpec& spec, const OperandSpec& extra);

// Emits `void <symbol>(ptr args)` for a spec the family supports: the exported entry calling the
// task runner (KernelArgs scalars) and the internal part function (matmul_emitter.cc).
// strided_c: C's rows are args.strides[output slot][2] elements apart (read per call; else N), so
// a caller may have the product written into a wider matrix (the conv family: a tile of pixel
// columns straight into the output's channel rows).
Status emitMatmulKernel(const KernelSpec& spec, llvm::Module& module, const std::string& symbol,
                        bool strided_c = false);

}  // namespace shapevm::jit::matmul
