// SPDX-License-Identifier: Apache-2.0
// The tiered JIT attached to one VirtualMachine. On the interpreter thread (afterRun/onLoopPoll,
// cheap): after the warm-up runs, find hot regions (HotPathDetector), and queue one compile
// request per hot site (O1: one kernel per op) or per site whose guards keep missing (a new
// shape). On the compile thread(s) (first installs, at compile_nice) and the tuning thread (O2's
// tuned recompiles, at tune_nice under a duty cycle): shape inference from the site's ProfileBuffer, codegen
// through the kernel backend (KernelBackend; today the LLVM CPU backend), validation against the reference kernel, then
// RuntimePatchManager installs the kernel. Failures are logged with a reason from abort_reasons.def; the site backs off
// (doubling) and is blacklisted after BlacklistAfter failures. Results never change: every fallback is the reference
// kernel. Invariant: the interpreter never waits for a compile (unless JitOptions::wait_for_compiles, a test/benchmark
// switch), and the Jit must be destroyed while its VM is not running.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "jit/backend.h"
#include "jit/backoff.h"
#include "jit/hot_path.h"
#include "jit/install_record.h"
#include "jit/patch_manager.h"
#include "jit/reasons.h"
#include "jit/region.h"
#include "jit/tuner.h"
#include "support/trace.h"
#include "vm/vm.h"

namespace shapevm::jit {

struct JitOptions {
  int level = -1;                  // 0/1/2; -1 = the JitLevel tunable
  bool wait_for_compiles = false;  // afterRun waits until queued compiles finish (deterministic tier-up)
  BackendOptions backend;          // which backend compiles kernels, for which target (debugger/perf
                                   // support come from the JitDebugger/JitPerf tunables)
  Tuner* tuner = nullptr;          // O2: chooses kernel parameters (src/tune's AutoTuner); not owned
  bool kernel_cache = true;        // compiled kernels kept in <kernel_cache_dir>/kernels (kernel_cache.h)
  std::string kernel_cache_dir;    // "" = defaultCacheDir() (support/cache_dir.h)
  bool first_sight = true;         // install what the cache's install record covers on first sight
                                   // (install_record.h); tests of the tiering thresholds turn it off
};

// One installed compile, for timelines (times in ms since the Jit was attached). The *_ms figures
// are wall time, the *_cpu_ms ones CPU time of every thread that worked on it (the compile thread
// and a region's helper threads): on a busy host a compile's wall time is mostly waiting for a core.
struct CompileEvent {
  std::string signature;
  double start_ms = 0, shape_infer_ms = 0, codegen_ms = 0, validate_patch_ms = 0;
  double tuning_ms = 0;
  bool tuning_cache_hit = false;
  bool region = false;       // a fused region (else one op's kernel)
  int kernels = 1;           // kernels it installed
  double queued_ms = 0;      // wall time from the request's queueing to the compile's start
  double total_ms = 0;       // wall time from the compile's start to the install (queued_ms + total_ms: end to end)
  double cpu_ms = 0;         // CPU from the compile's start to the install, all its threads
  double helper_cpu_ms = 0;  // of cpu_ms, a region's helper threads' (in parallel with the compile thread)
  double shape_infer_cpu_ms = 0, codegen_cpu_ms = 0, validate_patch_cpu_ms = 0, tuning_cpu_ms = 0;
};

struct JitStats {
  std::uint64_t hot_regions = 0;
  std::uint64_t requests = 0;            // compile requests queued
  std::uint64_t dropped_requests = 0;    // queue full
  std::uint64_t compiles = 0;            // kernels installed
  std::uint64_t compile_failures = 0;    // codegen/LLVM errors
  std::uint64_t validation_failures = 0;
  std::uint64_t blacklisted_sites = 0;
  double shape_infer_ms = 0, codegen_ms = 0, validate_patch_ms = 0;  // summed over installed kernels
  double tuning_ms = 0;                  // summed: AutoTuner time (compiling + timing candidates)
  // The same sums in CPU time of the compile thread and a region's helper threads (CompileEvent).
  double shape_infer_cpu_ms = 0, codegen_cpu_ms = 0, validate_patch_cpu_ms = 0, tuning_cpu_ms = 0;
  std::uint64_t tuned_kernels = 0;       // kernels whose parameters were chosen by timing
  std::uint64_t tuning_cache_hits = 0;   // kernels whose parameters came from the tuning database
  std::uint64_t tuning_deferred = 0;     // (stats() time) installed regions/kernels whose tuning does not pay off yet
  std::uint64_t compiles_deferred = 0;   // (stats() time) hot fused ranges whose compile does not pay off yet
  std::uint64_t early_compiles = 0;  // fused ranges queued before hot_count: their interpreted time repaid the compile
  std::uint64_t fused_regions = 0;       // O2 fused ranges installed
  std::uint64_t fused_ops = 0;           // CallOps folded into their fused kernels and epilogues
  std::uint64_t region_runs = 0;         // (stats() time) executions served by fused regions
  std::uint64_t region_declines = 0;     // executions a fused region declined (ran op by op)
  std::uint64_t region_row_blocked = 0;  // served executions that ran a producer and its consumers in row blocks
  std::uint64_t region_opaque_fallbacks = 0;  // opaque steps whose own kernel's guard missed (ran the reference kernel)
  std::vector<double> compile_ms;        // end-to-end per installed kernel
  std::vector<double> compile_cpu_ms;    // the same compiles' CPU time (CompileEvent::cpu_ms)
  std::vector<CompileEvent> events;      // per installed kernel, in install order
  std::uint64_t compiled_calls = 0;      // executions served by a compiled kernel (cache reuse)
  std::uint64_t interpreted_calls = 0;   // CallOp executions that ran a reference kernel
  std::uint64_t guard_misses = 0;
  std::uint64_t codegen_count = 0;       // (stats() time) LLVM code generations run by this JIT's backend
  std::uint64_t kernels_from_cache = 0;  // (stats() time) kernels whose code came from the kernel cache
  std::uint64_t first_sight_installs = 0;  // sites and fused ranges an install record had queued on first sight
  std::uint64_t compiles_pending =
      0;  // (stats() time) compiles and tunings queued or running: tuning figures are not final
  std::array<std::uint64_t, kNumJitReasons> fallbacks{};  // executions/events per reason
};

// What Jit::warmStart did with one site or fused range of an install record.
struct WarmStartItem {
  enum class Outcome : std::uint8_t { Installed, Declined, Failed, Skipped };
  int function = 0;
  bool region = false;  // a fused range (else one op site's kernel)
  int pc = 0;           // the site's CallOp, a range's first CallOp
  Outcome outcome = Outcome::Skipped;
  std::string reason;          // declined/failed/skipped: why; installed: what it installed
  std::uint64_t codegens = 0;  // LLVM code generations it ran (0: all code came from the kernel cache)
};

struct WarmStartReport {
  std::vector<WarmStartItem> items;
  std::string note;  // set when there was nothing to do: why (no kernel cache, no record, O0)
  bool timed_out = false, cancelled = false;
  double wall_ms = 0, cpu_ms = 0;  // the calling thread's (and a region's helper threads') CPU
};

namespace detail {
// Shared by first sight (jit.cc) and the warm start (warm_start.cc). The profile record `sig`
// (ProfileRecord::toString) stands for, built on `like` (same operand kinds and dtypes; nullopt
// when it does not fit), and the recorded signatures a member's records lack added on its newest.
std::optional<ProfileRecord> recordFromSignature(const ProfileRecord& like, std::string_view sig);
bool addRecordedShapes(std::vector<ProfileRecord>& member, const std::set<std::string>& sigs);
}  // namespace detail

class Jit final : public ExecutionObserver {
 public:
  // Attaches to `vm` (sets its observer). Level 0 attaches nothing that compiles but still
  // reports stats. Errors when LLVM cannot target the host.
  static Expected<std::unique_ptr<Jit>> attach(VirtualMachine& vm, JitOptions options = {});
  ~Jit() override;
  Jit(const Jit&) = delete;
  Jit& operator=(const Jit&) = delete;

  void afterRun(VirtualMachine& vm, int function) override;
  void onLoopPoll(VirtualMachine& vm, int function, int loop) override;

  // Blocks until no compile request is queued or running (tests, benchmarks, end of a CLI run).
  void waitIdle();
  // Shutdown without waiting: drops queued requests and cancels the running one at its next
  // cancellation point (jit/compile_cancel.h); nothing more is compiled or installed. The
  // destructor does the same, then joins the compile threads.
  void cancel();
  // After cancel(): true once no compile is running (false when `timeout` passed first, e.g. an
  // LLVM compile is still in progress; a process that is about to exit may abandon it then).
  bool waitStopped(std::chrono::milliseconds timeout);
  // Synchronous warm start, before the first call (the VM must not be running): installs every
  // site and fused range this function's install records list (install_record.h), compiling on
  // the calling thread, from profile records rebuilt from the recorded signatures on the operand
  // layouts an earlier process recorded. The kernel cache and the tuning database provide the
  // code and parameters; validation is the usual. Stops between and inside compiles once
  // `timeout` (0: none) has passed or `*cancel` is set; what is not installed then is left to
  // first sight. Nothing to do (no cache, no record) is a report with a note, never an error.
  WarmStartReport warmStart(std::chrono::milliseconds timeout, const std::atomic<bool>* cancel);
  int level() const { return level_; }
  JitStats stats() const;
  std::string statsReport() const;  // the block `shapevm run --stats` prints
  const RuntimePatchManager& patches() const { return *patches_; }
  // Runs whose afterRun skipped the scan because every site and range had settled (tests).
  std::uint64_t settledRuns() const { return settled_runs_.load(std::memory_order_relaxed); }
  KernelBackend& backend() { return *engine_; }

  struct SiteState {
    enum class Phase : std::uint8_t { Cold, Queued, Compiled, NoKernel, Unsupported, Blacklisted };
    Phase phase = Phase::Cold;
    int compiles = 0;                 // kernels installed at this site
    FailureBackoff backoff;           // failed attempts and when to try again
    std::uint64_t misses_at_request = 0;
    std::uint64_t misses_logged = 0;  // guard misses already reported (log rate limit: doubling)
    int region = -1;
    int pc = 0;
    // O2 pay-off aware tiering (as RangeState): the installed kernel has default parameters and
    // its tuning waits until the time spent at the site since the install repays it.
    bool tuned = true;
    double installed_ms = 0, tune_cost_ms = 0, tune_gain = 1;
    InterpretedCost interpreted;  // O2: stays interpreted while cheaper than a launch (hot_path.h)
  };
  SiteState siteState(int function, int site) const;

  // O2: one fusible range of a hot region (region.h) and how far it got.
  struct RangeState {
    enum class Phase : std::uint8_t { Cold, Queued, Installed, NotFused, Blacklisted };
    FusionRange range;
    int region = -1;
    Phase phase = Phase::Cold;
    int compiles = 0;
    FailureBackoff backoff;
    InterpretedCost interpreted;  // O2: stays interpreted while cheaper than a launch (hot_path.h)
    std::uint64_t declines_at_request = 0;
    std::shared_ptr<std::atomic<std::uint64_t>> declines = std::make_shared<std::atomic<std::uint64_t>>(0);
    std::shared_ptr<std::atomic<std::uint64_t>> row_blocked = std::make_shared<std::atomic<std::uint64_t>>(0);
    std::shared_ptr<std::atomic<std::uint64_t>> opaque_fallbacks = std::make_shared<std::atomic<std::uint64_t>>(0);
    std::shared_ptr<std::atomic<std::uint64_t>> runs = std::make_shared<std::atomic<std::uint64_t>>(0);
    std::string description;  // of the installed region
    bool tuned = false;       // the installed region's kernels have tuned parameters
    // Pay-off aware tiering (TunePayoff): tuning the installed untuned region waits until the time
    // spent in it since the install, times the expected gain, repays the estimated tuning cost.
    double installed_ms = 0;  // the range's cumulative time when the untuned region was installed
    double tune_cost_ms = 0;  // estimated: compiling + timing the candidates of its kernels
    double tune_gain = 1;     // expected fraction of its time that tuning saves
    bool deferred = false;    // hot, but its first compile does not pay off yet (CompilePayoffMs)
  };
  std::vector<RangeState> rangeStates(int function) const;

 private:
  struct Request {
    int function = 0;
    int site = 0;
    int range = -1;  // >= 0: a fused-range request (index into ranges_[function])
    bool tune = false;  // a fused-range request that tunes the installed region's kernels
    bool first_sight = false;           // queued on first sight from an install record (install_record.h)
    bool tuned_hint = false;            // first sight: the record's range was installed tuned (database hits)
    double queued_us = trace::nowUs();  // the timeline's "queued" span (support/trace.h)
    // warmStart: the profile records to compile from, per member site (instead of the profiles).
    const std::vector<std::vector<ProfileRecord>>* warm_records = nullptr;
  };
  Jit(VirtualMachine& vm, JitOptions options);
  void scan(int function, int only_loop);
  void loadInstallRecords();      // attach: each function's record from the kernel cache's directory
  void firstSight(int function);  // queues what the function's install record covers and the profile matches
  // The operand layouts (ProfileRecord in full: strides, non-tensor kinds) of the sites of an
  // install, kept beside the install record for warmStart (one per site, the first seen).
  void recordLayouts(int function, std::span<const int> sites);
  std::map<int, ProfileRecord> loadLayouts(int function);
  // warmStart's compile of one recorded range or site on the calling thread; fills `item`.
  void warmRange(int function, int range, const std::map<int, ProfileRecord>& layouts, WarmStartItem& item);
  void warmSite(int function, int site, const std::map<int, ProfileRecord>& layouts, WarmStartItem& item);
  // After an install: adds its signatures to the function's install record and writes the file.
  void recordInstall(int function, int index, bool range, int first_site, bool tuned,
                     std::vector<std::set<std::string>> sigs);
  // O2, a region not hot yet: starts its cold ranges' and sites' InterpretedCost intervals.
  void startRegionIntervals(int function, int region);
  void considerSite(int function, int site, const RegionHeat& heat);
  void workerLoop(bool tuning);  // a compile thread (false) or the tuning thread (true)
  void compileSite(const Request& request);
  // `early`: the region is not hot yet (hot_count), and the range is queued only where its
  // interpreted time already repays the compile (earlyCompilePaysOff).
  void considerRange(int function, int range, const RegionHeat& heat, bool early = false);
  void compileRange(const Request& request);
  bool payoffWaits() const;  // TunePayoff on and no --jit-wait
  bool tuningPaysOff(double ran_ms, double cost_ms, double gain) const;
  bool regionCompilePaysOff(int function, RangeState& state);  // mutex_ held
  // The counted estimate of a range's first compile (regionCompilePaysOff); -1: no pay-off rule
  // (--jit-wait, O1, tune_payoff=0, compile_payoff_ms=0 or hot_ms=0). `spare_cores` gets the
  // spare cores it was counted with.
  double regionCompileCostMs(int function, const RangeState& state, int& spare_cores);  // mutex_ held
  // O2, a range of a region not hot yet, cold and never compiled: paysOffBeforeHot (hot_path.h).
  bool earlyCompilePaysOff(int function, RangeState& state);  // mutex_ held
  TuneEstimate estimateTuning(const CompiledRegion& region, double codegen_cpu_ms) const;
  bool coveredByRange(int function, int site) const;  // callers hold mutex_
  void recordFailure(int function, int site, JitReason reason, const std::string& why);
  TuneOutcome tuneSpec(const KernelFamily& family, const KernelSpec& spec, std::span<const Shape> observed, int pc);
  void noteTuning(const TuneOutcome& tuned);  // callers hold mutex_
  void noteEvent(const CompileEvent& event);  // callers hold mutex_: an install's times into stats_
  void logGuardMisses(int function, int site, SiteState& state);
  // Callers hold mutex_. `provisional` is set when the function settles only because sites or
  // ranges stay interpreted while cheaper than a launch (a timed verdict, re-checked later).
  bool functionSettled(int function, bool& provisional);
  void trySettle();

  VirtualMachine& vm_;
  JitOptions options_;
  int level_ = 0;
  std::unique_ptr<KernelBackend> engine_;  // from createBackend(options.backend) (level >= 1)
  std::unique_ptr<RuntimePatchManager> patches_;
  std::vector<std::vector<Region>> regions_;          // per function
  std::vector<std::vector<SiteState>> sites_;         // per function, per op site
  std::vector<std::vector<RangeState>> ranges_;       // per function (O2)
  std::vector<std::unique_ptr<Liveness>> liveness_;   // per function (O2)
  // Install records (install_record.h), per function: the file ("" = none kept), what earlier
  // processes and this one installed (mutex_), and the first-sight entries not checked yet
  // (interpreter thread; `first_sight_` says whether any are left).
  struct FunctionRecord {
    std::string file;
    InstallRecord record;
    std::vector<int> pending_sites, pending_ranges;
  };
  std::vector<FunctionRecord> install_records_;
  std::vector<char> first_sight_;
  std::mutex record_write_mutex_;  // one writer of the record files at a time

  mutable std::mutex mutex_;                          // sites_, stats_, queue_
  std::condition_variable queue_cv_;
  std::condition_variable idle_cv_;
  std::deque<Request> queue_;
  int in_flight_ = 0;
  bool scratch_released_ = true;  // the allocator's scratch pages went back since the last request
  bool stopping_ = false;
  std::atomic<bool> cancel_{false};  // set at destruction: the workers' cancel flag
  JitStats stats_;
  // Pay-off aware compiling (mutex_): the compile-thread CPU per kernel of this process's last
  // region compile (-1: none yet), and whether the kernel cache held entries (-1: not looked).
  double compile_ms_per_kernel_ = -1;
  int kernel_cache_warm_ = -1;
  // afterRun's fast path, touched only by the VM's running thread (runs are serialized): once
  // nothing is queued or compiling and every site and range is settled (nothing a scan could do
  // for it: compiled and tuned without new guard misses or region declines, no kernel,
  // blacklisted), afterRun skips the scan until a guard miss or region decline (ExecStats), a loop
  // poll, or a call of a function that had not settled. Checked every kSettleCheckRuns runs.
  static constexpr int kSettleCheckRuns = 8;
  // A settle that rests on cheaper-interpreted verdicts lasts this many runs, then a scan re-times them.
  static constexpr std::uint64_t kProvisionalRuns = 32;
  bool settled_ = false;
  std::uint64_t settled_until_run_ = 0;  // ExecStats::runs at which a provisional settle ends (0: none)
  std::uint64_t settled_guard_misses_ = 0;
  std::uint64_t settled_region_declines_ = 0;
  std::vector<std::pair<int, std::uint64_t>> settled_watch_;  // unsettled functions, their calls then
  int runs_to_settle_check_ = kSettleCheckRuns;
  std::atomic<std::uint64_t> settled_runs_{0};
  std::vector<std::thread> workers_;  // the compile threads, then the tuning thread if any
  bool tune_worker_ = false;          // a tuning thread takes Request::tune (set before workers start)
  std::chrono::steady_clock::time_point attached_at_ = std::chrono::steady_clock::now();
};

}  // namespace shapevm::jit
