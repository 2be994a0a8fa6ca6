// SPDX-License-Identifier: Apache-2.0
// O2 region fusion: a fused PC range of a hot region compiled as a whole.
//
// A fusible range is a maximal run of CallOps (and Moves between them) inside one hot region
// whose ops take only tensor inputs (optional inputs may be omitted). The planner turns it into SSA values and a short list of
// steps: matmuls with their epilogue (bias, activation, residual add absorbed into the matmul's
// store), fused elementwise kernels (fusion.h; every view and broadcast on the way becomes a
// leaf's strides, so reshape/transpose/split/squeeze cost no copy and intermediates are never
// materialized), fused reductions (sum/mean/max/min over trailing axes computing their producers
// in the loop; softmax, log_softmax and layer_norm become float32 statistics plus elementwise
// nodes) and opaque ops run by their own O1 kernel or the reference kernel. A value is
// materialized only when a matmul or opaque op reads it or a register still needed after the
// range (liveness.h) holds it.
//
// At run time the region entry (CompiledRegionFn, installed at the range's first CallOp slot by
// the one patch point) reads the external registers, checks dtype/rank guards and every kernel's
// own guard, runs the steps into output buffers it keeps and reuses across executions, and only
// then writes the live registers and resumes after the range. Any mismatch before the write-back
// declines: the interpreter runs the range op by op, so results never change.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <ctime>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "bytecode/module.h"
#include "jit/compiled_kernel.h"
#include "jit/fusion.h"
#include "jit/hot_path.h"
#include "jit/liveness.h"
#include "jit/tuner.h"
#include "vm/profile.h"

namespace shapevm::jit {

// A candidate range: [start_pc, resume_pc) with its CallOp sites in PC order.
struct FusionRange {
  int start_pc = 0;   // the first CallOp (where the region entry is installed)
  int resume_pc = 0;  // one past the last instruction of the range
  std::vector<int> sites;
  std::vector<int> pcs;
  // LoadConst / TuplePack inside the range (a reshape's target shape): they read only registers
  // the range's ops do not write and write registers those ops neither read before nor write, so
  // the region runs them first, at entry (re-running them after a decline gives the same values).
  std::vector<int> prelude;
};

// The fusible ranges of a region (each with >= 2 CallOps that could fuse).
std::vector<FusionRange> fusionRanges(const Function& function, const Region& region);

struct RegionPlan;  // region_plan.h
class ReferenceRunStore;  // install_record.h

// The state behind an installed region entry.
class CompiledRegion {
 public:
  ~CompiledRegion();
  std::string describe() const;               // "matmul+add, matmul+add+add, fused(...)"
  std::vector<KernelHandle*> handles();       // every kernel's code (for the patch manager)
  int kernels() const;
  int fusedOps() const;                       // CallOps folded into fused kernels and epilogues

  // Runs the range on `registers`; false = declined (no register written).
  bool run(std::span<Value> registers) const;

  std::unique_ptr<RegionPlan> plan;
  FusionRange range;
  // Executions declined / served; shared with whoever watches the region (the Jit passes its
  // range's counters, which outlive a replaced region).
  std::shared_ptr<std::atomic<std::uint64_t>> decline_counter = std::make_shared<std::atomic<std::uint64_t>>(0);
  std::shared_ptr<std::atomic<std::uint64_t>> run_counter = std::make_shared<std::atomic<std::uint64_t>>(0);
  // Served executions that ran at least one block of kernels in row blocks (RegionRowBlockKb).
  std::shared_ptr<std::atomic<std::uint64_t>> row_block_counter = std::make_shared<std::atomic<std::uint64_t>>(0);
  // Opaque steps run by the reference kernel because their own kernel's guard missed (logged once).
  std::shared_ptr<std::atomic<std::uint64_t>> opaque_fallback_counter = std::make_shared<std::atomic<std::uint64_t>>(0);

 private:
  mutable std::atomic<bool> busy_{false};     // buffer reuse only when not re-entered
};

// Where a region compile's time went (ms): planning (graph, reference run on the observed shapes,
// fusion decisions — the region's shape inference), kernel codegen (tuning excluded) and validation.
// The *_cpu_ms figures are CPU time (threadCpuMs) of every thread that worked on it: codegen counts
// the helper threads that compiled kernels in parallel too, so it can exceed its wall time. CPU
// figures add up over a plan given up for another (compileRegion's second try); wall times do not.
struct RegionCompileTimes {
  double plan_ms = 0, codegen_ms = 0, validate_ms = 0;
  double plan_cpu_ms = 0, codegen_cpu_ms = 0, validate_cpu_ms = 0, tuning_cpu_ms = 0;
  double helper_cpu_ms = 0;     // of that, the helper threads' (beside the calling compile thread)
  bool reference_kept = false;  // the planning run was an earlier process's, replayed
};

// CPU time of the calling thread (ms): a compile's own work, without its waits for a core (compile
// threads run below the interpreter's priority, so on a busy host their wall time is mostly waiting).
inline double threadCpuMs() {
  timespec now{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) * 1e3 + static_cast<double>(now.tv_nsec) * 1e-6;
}

// The CompiledRegionFn installed in the dispatch slot (state = const CompiledRegion*).
bool runCompiledRegion(const void* state, std::span<Value> registers);

// The library kernel an untuned matmul is installed as (an O1 site, an O2 region's untuned
// install), if any: for float32 operands, the first library candidate of the family's search
// space, oneDNN's primitive (none when LibraryCandidates=0 or oneDNN cannot express the spec).
// The generated kernel stays the fallback; the tuner still times both kinds.
std::optional<KernelParams> untunedLibraryParams(KernelBackend& engine, const KernelFamily& family,
                                                 const KernelSpec& spec);

// Plans, compiles and validates `range`: `records[k]` are the profile records of range.sites[k].
// `compiles` = earlier compiles of this range (the matmul range policy widens with it). With a
// tuner, each kernel's parameters are tuned (one outcome per tuned kernel in *tuning). The result is validated
// against the reference kernels run op by op on fresh random inputs of the observed shapes.
// `kept_run`: where an earlier process kept that reference run for the same inputs (replayed
// instead of run, install_record.h), and where this one keeps it.
Expected<std::unique_ptr<CompiledRegion>> compileRegion(
    KernelBackend& engine, const Module& module, const Function& function, const FusionRange& range,
    const Liveness& liveness, std::span<const std::vector<ProfileRecord>> records, int compiles, Tuner* tuner,
    std::vector<TuneOutcome>* tuning, RegionCompileTimes* times = nullptr, const ReferenceRunStore* kept_run = nullptr);

}  // namespace shapevm::jit
