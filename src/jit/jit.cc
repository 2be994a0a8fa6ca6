// SPDX-License-Identifier: Apache-2.0
// The tiered JIT: hotness checks on the interpreter thread, compiles on the worker thread(s)
// (see jit.h for the flow and the invariants).
#include "jit/jit.h"

#include <algorithm>
#include <bit>
#include <charconv>
#include <chrono>
#include <ctime>

#include <fmt/format.h>

#include "bytecode/text_format.h"
#include "jit/compile_cancel.h"
#include "jit/compiled_kernel.h"
#include "jit/kernel_cache.h"
#include "jit/region_plan.h"
#include "jit/shape_infer.h"
#include "jit/validate.h"
#include "support/cache_dir.h"
#include "support/cpu_cores.h"
#include "support/logging.h"
#include "support/thread_pool.h"
#include "support/trace.h"
#include "support/tunables.h"

namespace shapevm::jit {

namespace {
using Clock = std::chrono::steady_clock;
double msSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// "MatMul:(320,128)x(128,1024)" from a profile record (what the detector saw).
std::string recordSignature(OpId op, const ProfileRecord& record) {
  std::string text = fmt::format("{}:", opIdent(op));
  for (std::size_t i = 0; i < record.inputs.size(); ++i) {
    if (i > 0) text += "x";
    const OperandProfile& operand = record.inputs[i];
    if (!operand.is_tensor) {
      text += "scalar";
      continue;
    }
    text += "(";
    for (int d = 0; d < operand.shape.rank(); ++d) text += (d ? "," : "") + std::to_string(operand.shape[d]);
    text += ")";
  }
  return text;
}

}  // namespace

Jit::Jit(VirtualMachine& vm, JitOptions options) : vm_(vm), options_(options) {}

Expected<std::unique_ptr<Jit>> Jit::attach(VirtualMachine& vm, JitOptions options) {
  std::unique_ptr<Jit> jit(new Jit(vm, options));
  jit->level_ = options.level >= 0 ? options.level : static_cast<int>(Tunables::get(Tunable::JitLevel));
  const std::int64_t log_level = Tunables::get(Tunable::JitLog);
  const LogLevel wanted = log_level >= 2 ? LogLevel::Debug : LogLevel::Info;
  if (log_level != 0 && !Log::enabled(wanted)) Log::setThreshold(wanted);
  if (jit->level_ >= 1) {
    BackendOptions backend_options = options.backend;
    backend_options.debugger_support = Tunables::get(Tunable::JitDebugger) != 0;
    backend_options.perf_support = Tunables::get(Tunable::JitPerf) != 0;
    SVM_ASSIGN_OR_RETURN(jit->engine_, createBackend(backend_options));
    if (options.kernel_cache) {
      jit->engine_->setKernelCache(
          KernelCache::forDirectory(options.kernel_cache_dir.empty() ? defaultCacheDir() : options.kernel_cache_dir));
    }
    jit->patches_ = std::make_unique<RuntimePatchManager>(vm, *jit->engine_);
  }
  const Module& module = vm.module();
  for (std::size_t f = 0; f < module.functions.size(); ++f) {
    const Function& fn = module.functions[f];
    jit->regions_.push_back(findRegions(fn));
    std::vector<SiteState> states(fn.op_sites.size());
    for (std::size_t r = 0; r < jit->regions_.back().size(); ++r) {
      const Region& region = jit->regions_.back()[r];
      for (std::size_t k = 0; k < region.sites.size(); ++k) {
        SiteState& state = states[static_cast<std::size_t>(region.sites[k])];
        state.region = static_cast<int>(r);
        state.pc = region.pcs[k];
      }
    }
    jit->sites_.push_back(std::move(states));
    std::vector<RangeState> ranges;
    if (jit->level_ >= 2) {
      for (std::size_t r = 0; r < jit->regions_.back().size(); ++r) {
        for (FusionRange& range : fusionRanges(fn, jit->regions_.back()[r])) {
          RangeState state;
          state.range = std::move(range);
          state.region = static_cast<int>(r);
          ranges.push_back(std::move(state));
        }
      }
      jit->liveness_.push_back(std::make_unique<Liveness>(fn));
    } else {
      jit->liveness_.push_back(nullptr);
    }
    jit->ranges_.push_back(std::move(ranges));
  }
  jit->loadInstallRecords();
  if (jit->level_ >= 1) {
    // Tuning requests exist only at O2 with a tuner: they get their own, lower-priority thread
    // (set before any worker starts: the compile threads read it).
    jit->tune_worker_ = jit->level_ >= 2 && options.tuner != nullptr;
    const auto threads = static_cast<int>(Tunables::get(Tunable::CompileThreads));
    for (int t = 0; t < threads; ++t) jit->workers_.emplace_back([raw = jit.get()] { raw->workerLoop(false); });
    if (jit->tune_worker_) jit->workers_.emplace_back([raw = jit.get()] { raw->workerLoop(true); });
  }
  vm.options().observer = jit.get();
  return jit;
}

Jit::~Jit() {
  cancel();
  for (std::thread& worker : workers_) worker.join();
  if (vm_.options().observer == this) vm_.options().observer = nullptr;
  patches_.reset();  // unpublishes every table (the VM is not running) and frees the kernels
  engine_.reset();
}

void Jit::afterRun(VirtualMachine& vm, int) {
  if (level_ < 1) return;
  if (settled_) {
    const ExecStats& exec = vm.stats();
    const bool expired = settled_until_run_ != 0 && exec.runs >= settled_until_run_;
    bool quiet =
        !expired && exec.guard_misses == settled_guard_misses_ && exec.region_declines == settled_region_declines_;
    for (const auto& [function, calls] : settled_watch_) {
      quiet = quiet && vm.runtime(function).calls.load(std::memory_order_relaxed) == calls;
    }
    if (quiet) {
      settled_runs_.fetch_add(1, std::memory_order_relaxed);
      return;  // nothing a scan could do: nothing is queued or compiling, so nothing to wait for or reclaim
    }
    settled_ = false;
    runs_to_settle_check_ = expired ? 1 : kSettleCheckRuns;  // a re-timed verdict may settle at once
  }
  for (std::size_t f = 0; f < regions_.size(); ++f) scan(static_cast<int>(f), -1);
  if (options_.wait_for_compiles) {
    const ProgramThreadBlocked blocked;  // its core is the compile's meanwhile (helper threads may take it)
    waitIdle();
  }
  patches_->reclaim();
  if (--runs_to_settle_check_ <= 0) {
    runs_to_settle_check_ = kSettleCheckRuns;
    trySettle();
  }
}

void Jit::trySettle() {
  const ExecStats& exec = vm_.stats();
  std::vector<std::pair<int, std::uint64_t>> watch;
  bool provisional = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!queue_.empty() || in_flight_ > 0 || stopping_) return;
    for (std::size_t f = 0; f < sites_.size(); ++f) {
      const int function = static_cast<int>(f);
      if (functionSettled(function, provisional)) continue;
      // Not settled, but a function that is not called again gets no hotter (its loops poll).
      watch.emplace_back(function, vm_.runtime(function).calls.load(std::memory_order_relaxed));
    }
  }
  if (patches_->retiredPending() > 0) return;
  settled_watch_ = std::move(watch);
  settled_guard_misses_ = exec.guard_misses;
  settled_region_declines_ = exec.region_declines;
  settled_until_run_ = provisional ? exec.runs + kProvisionalRuns : 0;
  settled_ = true;
}

bool Jit::functionSettled(int function, bool& provisional) {
  const auto f = static_cast<std::size_t>(function);
  const FunctionRuntime& runtime = vm_.runtime(function);
  // A scan (this very afterRun: no call since) found it cheaper interpreted than a launch, so it
  // stays interpreted; asked again with the same counters, cheaperInterpreted changes nothing.
  auto cheaper = [&](InterpretedCost& cost, const std::vector<int>& sites) {
    const bool stays = cost.calls > 0 && cheaperInterpreted(cost, sites, runtime, level_);
    provisional = provisional || stays;
    return stays;
  };
  for (RangeState& range : ranges_[f]) {
    using Phase = RangeState::Phase;
    if (range.phase == Phase::NotFused || range.phase == Phase::Blacklisted) continue;
    if (range.phase == Phase::Cold && range.compiles == 0 && range.backoff.failures == 0 &&
        cheaper(range.interpreted, range.range.sites)) {
      continue;
    }
    const bool tunes = level_ >= 2 && options_.tuner != nullptr && !range.tuned;
    if (range.phase == Phase::Installed && !tunes &&
        range.declines->load(std::memory_order_relaxed) == range.declines_at_request) {
      continue;
    }
    return false;
  }
  const auto widen_after = static_cast<std::uint64_t>(Tunables::get(Tunable::GuardMissRecompile));
  for (std::size_t s = 0; s < sites_[f].size(); ++s) {
    SiteState& state = sites_[f][s];
    using Phase = SiteState::Phase;
    if (state.phase == Phase::NoKernel || state.phase == Phase::Unsupported || state.phase == Phase::Blacklisted)
      continue;
    if (state.compiles == 0 && coveredByRange(function, static_cast<int>(s))) continue;  // ranges settled above
    if (state.phase == Phase::Cold && state.compiles == 0 && state.backoff.failures == 0 &&
        cheaper(state.interpreted, {static_cast<int>(s)})) {
      continue;
    }
    if (state.phase == Phase::Compiled && state.compiles > 0 && state.tuned) {
      const std::uint64_t misses = runtime.slots[s].guard_misses.load(std::memory_order_relaxed);
      if (misses == state.misses_logged && misses - state.misses_at_request < widen_after) continue;
    }
    return false;
  }
  return true;
}

void Jit::onLoopPoll(VirtualMachine&, int function, int loop) {
  if (level_ < 1) return;
  settled_ = false;  // a scan that may queue: afterRun scans (and may wait) again
  scan(function, loop);
}

void Jit::scan(int function, int only_loop) {
  if (first_sight_[static_cast<std::size_t>(function)] != 0) firstSight(function);
  FunctionRuntime& runtime = vm_.runtime(function);
  if (runtime.calls.load(std::memory_order_relaxed) < static_cast<std::uint64_t>(Tunables::get(Tunable::WarmupRuns))) return;
  const std::vector<Region>& regions = regions_[static_cast<std::size_t>(function)];
  for (const Region& region : regions) {
    if (only_loop >= 0 && (region.kind != Region::Kind::Loop || region.loop != only_loop)) continue;
    const RegionHeat heat = measureRegion(region, runtime);
    const int region_index = static_cast<int>(&region - regions.data());
    if (!isHot(heat)) {
      // O2: its cold ranges' and sites' interpreted-cost intervals (cheaperInterpreted) start
      // now, after the warm-up, so the run that makes the region hot has one measured and may
      // queue at once, instead of starting the first interval then and waiting kMinInterval runs.
      if (level_ >= 2) {
        startRegionIntervals(function, region_index);
        // Pay-off aware hotness: a range whose calls are expensive need not wait for hot_count.
        const std::vector<RangeState>& cold = ranges_[static_cast<std::size_t>(function)];
        for (std::size_t r = 0; r < cold.size(); ++r) {
          if (cold[r].region == region_index) considerRange(function, static_cast<int>(r), heat, /*early=*/true);
        }
      }
      continue;
    }
    const std::vector<RangeState>& ranges = ranges_[static_cast<std::size_t>(function)];
    for (std::size_t r = 0; r < ranges.size(); ++r) {
      if (ranges[r].region == region_index) considerRange(function, static_cast<int>(r), heat);
    }
    for (int site : region.sites) considerSite(function, site, heat);
  }
}

void Jit::startRegionIntervals(int function, int region) {
  const FunctionRuntime& runtime = vm_.runtime(function);
  const auto f = static_cast<std::size_t>(function);
  std::lock_guard<std::mutex> lock(mutex_);
  for (RangeState& state : ranges_[f]) {
    if (state.region == region && state.phase == RangeState::Phase::Cold && state.compiles == 0) {
      shapevm::jit::startInterpretedCost(state.interpreted, state.range.sites, runtime);
    }
  }
  for (int site : regions_[f][static_cast<std::size_t>(region)].sites) {
    SiteState& state = sites_[f][static_cast<std::size_t>(site)];
    if (state.phase == SiteState::Phase::Cold && state.compiles == 0) {
      shapevm::jit::startInterpretedCost(state.interpreted, {site}, runtime);
    }
  }
}

void Jit::loadInstallRecords() {
  install_records_.resize(regions_.size());
  first_sight_.assign(regions_.size(), 0);
  KernelCache* cache = engine_ ? engine_->kernelCache() : nullptr;
  if (cache == nullptr || cache->directory().empty()) return;
  const bool use = options_.first_sight;  // records are still written for later processes
  const std::string code_identity = engine_->codeIdentity();
  for (std::size_t f = 0; f < regions_.size(); ++f) {
    FunctionRecord& entry = install_records_[f];
    // The bytecode as loaded: no compile has rewritten a token yet.
    const std::string identity =
        installRecordIdentity(disassembleFunction(vm_.module(), static_cast<int>(f)), level_, code_identity);
    entry.file = InstallRecord::fileName(identity);
    entry.record.identity = identity;
    const std::optional<std::string> text = cache->readInstallRecord(entry.file);
    if (!text) continue;
    Expected<InstallRecord> loaded = InstallRecord::decode(*text);
    if (loaded && loaded->identity != identity) {
      loaded = makeError(ErrorCode::InvalidArgument, "it holds another function's identity");
    }
    if (!loaded) {
      logAt(LogLevel::Warn, "JIT", "kernel cache: ignoring install record {}/{}: {}", cache->directory(), entry.file,
            loaded.status().message());
      continue;
    }
    entry.record = std::move(*loaded);
    const auto sites = static_cast<int>(sites_[f].size());
    const auto ranges = static_cast<int>(ranges_[f].size());
    for (const auto& [site, unused] : entry.record.sites) {
      if (site < sites) entry.pending_sites.push_back(site);
    }
    for (const auto& [range, unused] : entry.record.ranges) {
      if (range < ranges) entry.pending_ranges.push_back(range);
    }
    first_sight_[f] = use && (!entry.pending_sites.empty() || !entry.pending_ranges.empty()) ? 1 : 0;
  }
}

namespace {
// Whether each member site's newest profile record is one the install record lists for it:
// 1 yes, 0 no (a shape the earlier process did not install for), -1 not profiled yet.
// `signature` gets the log's signature of the first MatMul member (else the first member).
int matchesRecord(const Function& fn, FunctionRuntime& runtime, std::span<const int> sites,
                  const InstallRecord::Entry& entry, std::string& signature) {
  if (entry.sigs.size() != sites.size()) return 0;
  bool matmul = false;
  for (std::size_t k = 0; k < sites.size(); ++k) {
    const std::vector<ProfileRecord> records = runtime.profiles[static_cast<std::size_t>(sites[k])].snapshot();
    const ProfileRecord* newest = newestRecord(records);
    if (newest == nullptr) return -1;
    if (entry.sigs[k].count(newest->toString()) == 0) return 0;
    const OpId op = fn.op_sites[static_cast<std::size_t>(sites[k])].op;
    if (signature.empty() || (!matmul && op == OpId::MatMul)) {
      signature = recordSignature(op, *newest);
      matmul = op == OpId::MatMul;
    }
  }
  return 1;
}
}  // namespace

// Install-record entries whose sites have run with shapes the record lists are queued at once:
// no warm-up, no hot-path detection, no pay-off deferral (the code is expected in the kernel cache;
// the compile still validates it and installs it behind its guards). An entry is checked until
// its sites were profiled, and not after the warm-up; what does not match takes the usual path.
void Jit::firstSight(int function) {
  FunctionRuntime& runtime = vm_.runtime(function);
  const auto f = static_cast<std::size_t>(function);
  const Function& fn = vm_.module().functions[f];
  FunctionRecord& entry = install_records_[f];
  const bool last_chance = runtime.calls.load(std::memory_order_relaxed) >=
                           static_cast<std::uint64_t>(std::max<std::int64_t>(Tunables::get(Tunable::WarmupRuns), 1));
  bool queued = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto queue_full = [&] {
      return queue_.size() >= static_cast<std::size_t>(Tunables::get(Tunable::CompileQueue));
    };
    std::erase_if(entry.pending_ranges, [&](int range) {
      RangeState& state = ranges_[f][static_cast<std::size_t>(range)];
      const InstallRecord::Entry& recorded = entry.record.ranges.at(range);
      if (state.phase != RangeState::Phase::Cold || state.compiles > 0) return true;
      if (state.range.sites.empty() || state.range.sites[0] != recorded.first_site) return true;
      std::string signature;
      const int match = matchesRecord(fn, runtime, state.range.sites, recorded, signature);
      if (match < 0 || queue_full()) return last_chance;
      if (match == 0) return true;
      state.phase = RangeState::Phase::Queued;
      state.declines_at_request = state.declines->load(std::memory_order_relaxed);
      queue_.push_back(Request{function, state.range.sites[0], range, false, true, recorded.tuned});
      ++stats_.requests;
      // The usual tier-up lines and trace event (tools and tests read them), then why it came early.
      std::string ops;
      for (std::size_t k = 0; k < state.range.sites.size(); ++k) {
        ops += (k ? "+" : "") + std::string(opIdent(fn.op_sites[static_cast<std::size_t>(state.range.sites[k])].op));
      }
      logAt(LogLevel::Info, "JIT", "Hot path detected at PC=0x{:02X}, signature={}", state.range.start_pc, signature);
      logAt(LogLevel::Info, "JIT", "Region at PC=0x{:02X}..0x{:02X}: {} ops: {}", state.range.start_pc,
            state.range.resume_pc - 1, state.range.sites.size(), ops);
      logAt(LogLevel::Info, "JIT",
            "First sight: the region at PC=0x{:02X} is in the install record, compile queued (no warm-up, no "
            "hot-path detection)",
            state.range.start_pc);
      trace::instant("jit", "compile queued",
                     trace::Args().addPc(state.range.start_pc).add("signature", signature).add("ops", ops));
      queued = true;
      return true;
    });
    std::erase_if(entry.pending_sites, [&](int site) {
      SiteState& state = sites_[f][static_cast<std::size_t>(site)];
      if (state.phase != SiteState::Phase::Cold || state.compiles > 0 || coveredByRange(function, site)) return true;
      const int one[] = {site};
      std::string signature;
      const int match = matchesRecord(fn, runtime, one, entry.record.sites.at(site), signature);
      if (match < 0 || queue_full()) return last_chance;
      if (match == 0) return true;
      state.phase = SiteState::Phase::Queued;
      state.misses_at_request =
          runtime.slots[static_cast<std::size_t>(site)].guard_misses.load(std::memory_order_relaxed);
      queue_.push_back(Request{function, site, -1, false, true, false});
      ++stats_.requests;
      logAt(LogLevel::Info, "JIT", "Hot path detected at PC=0x{:02X}, signature={}", state.pc, signature);
      logAt(LogLevel::Info, "JIT", "First sight: PC=0x{:02X} is in the install record, compile queued", state.pc);
      trace::instant("jit", "compile queued", trace::Args().addPc(state.pc).add("signature", signature));
      queued = true;
      return true;
    });
    if (entry.pending_sites.empty() && entry.pending_ranges.empty()) first_sight_[f] = 0;
  }
  if (queued) queue_cv_.notify_all();
}

namespace detail {
// The profile record `sig` (ProfileRecord::toString) stands for, built on `like` (the site's
// current record: same operand kinds and dtypes): its tensors get the signature's shapes
// (contiguous strides where the shape differs). nullopt when `sig` does not fit `like`.
std::optional<ProfileRecord> recordFromSignature(const ProfileRecord& like, std::string_view sig) {
  ProfileRecord out = like;
  out.count = 1;
  out.last_seen = like.last_seen > 0 ? like.last_seen - 1 : 0;  // older: the current record stays the newest
  for (OperandProfile& operand : out.inputs) {
    const std::size_t end = std::min(sig.find(" x "), sig.size());
    const std::string_view text = sig.substr(0, end);
    sig.remove_prefix(std::min(end + 3, sig.size()));
    if (!operand.is_tensor) {
      if (text != "_") return std::nullopt;
      continue;
    }
    const std::string_view dtype = dtypeShortName(operand.dtype);
    if (text.size() < dtype.size() + 2 || text.substr(0, dtype.size()) != dtype || text[dtype.size()] != '(' ||
        text.back() != ')') {
      return std::nullopt;
    }
    Shape shape;
    std::string_view dims = text.substr(dtype.size() + 1, text.size() - dtype.size() - 2);
    while (!dims.empty()) {
      const std::size_t comma = std::min(dims.find(','), dims.size());
      std::int64_t d = 0;
      const auto [ptr, error] = std::from_chars(dims.data(), dims.data() + comma, d);
      if (error != std::errc() || ptr != dims.data() + comma || d < 0 || shape.rank() >= kMaxRank) return std::nullopt;
      shape.push_back(d);
      dims.remove_prefix(std::min(comma + 1, dims.size()));
    }
    if (shape.rank() != operand.shape.rank()) return std::nullopt;
    if (!(shape == operand.shape) && operand.strides.rank() == shape.rank()) {
      std::int64_t stride = 1;
      for (int d = shape.rank() - 1; d >= 0; --d) {
        operand.strides[d] = stride;
        stride *= std::max<std::int64_t>(shape[d], 1);
      }
    }
    operand.shape = shape;
  }
  if (!sig.empty()) return std::nullopt;
  return out;
}

// Adds to one site's profile (`member`) the recorded signatures it lacks, each rebuilt on its
// newest record (recordFromSignature); true when any was added. Only where every operand is a
// tensor: a rebuilt record keeps this run's non-tensor operands (a Reshape's target), which need
// not fit the recorded shapes.
bool addRecordedShapes(std::vector<ProfileRecord>& member, const std::set<std::string>& sigs) {
  const ProfileRecord* current = newestRecord(member);
  if (current == nullptr || !std::all_of(current->inputs.begin(), current->inputs.end(),
                                         [](const OperandProfile& operand) { return operand.is_tensor; })) {
    return false;
  }
  const ProfileRecord like = *current;
  bool added = false;
  for (const std::string& sig : sigs) {
    if (sig == like.toString()) continue;
    if (std::optional<ProfileRecord> seen = recordFromSignature(like, sig)) {
      member.push_back(std::move(*seen));
      added = true;
    }
  }
  return added;
}
}  // namespace detail
using detail::addRecordedShapes;

void Jit::recordInstall(int function, int index, bool range, int first_site, bool tuned,
                        std::vector<std::set<std::string>> sigs) {
  KernelCache* cache = engine_->kernelCache();
  FunctionRecord& entry = install_records_[static_cast<std::size_t>(function)];
  if (cache == nullptr || entry.file.empty()) return;
  if (range) {
    recordLayouts(function, ranges_[static_cast<std::size_t>(function)][static_cast<std::size_t>(index)].range.sites);
  } else {
    const int one[] = {index};
    recordLayouts(function, one);
  }
  InstallRecord::Entry added;
  added.first_site = first_site;
  added.tuned = tuned;
  added.sigs = std::move(sigs);
  InstallRecord mine;
  (range ? mine.ranges : mine.sites).emplace(index, std::move(added));
  std::string file;
  InstallRecord snapshot;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    entry.record.merge(mine);
    snapshot = entry.record;
    file = entry.file;
  }
  // Another process may have written the same record meanwhile: keep its entries too.
  std::lock_guard<std::mutex> write_lock(record_write_mutex_);
  const std::optional<std::string> text = cache->readInstallRecord(file);
  if (text) {
    Expected<InstallRecord> theirs = InstallRecord::decode(*text);
    if (theirs && theirs->identity == snapshot.identity) snapshot.merge(*theirs);
  }
  std::string encoded = snapshot.encode();
  if (text && *text == encoded) return;  // nothing new (a first-sight install of what it lists)
  (void)cache->writeInstallRecord(file, encoded);
}

void Jit::considerSite(int function, int site, const RegionHeat& heat) {
  const Function& fn = vm_.module().functions[static_cast<std::size_t>(function)];
  const OpSite& op_site = fn.op_sites[static_cast<std::size_t>(site)];
  DispatchSlot& slot = vm_.runtime(function).slots[static_cast<std::size_t>(site)];
  std::unique_lock<std::mutex> lock(mutex_);
  SiteState& state = sites_[static_cast<std::size_t>(function)][static_cast<std::size_t>(site)];
  using Phase = SiteState::Phase;
  if (state.phase == Phase::NoKernel || state.phase == Phase::Unsupported || state.phase == Phase::Blacklisted ||
      state.phase == Phase::Queued || (state.compiles == 0 && coveredByRange(function, site))) {
    return;
  }
  if (state.compiles == 0 && state.backoff.failures == 0 && familyFor(op_site.op) == nullptr) {
    state.phase = Phase::NoKernel;
    logAt(LogLevel::Info, "JIT", "Fallback at PC=0x{:02X}: no kernel for op '{}' ({}); it stays interpreted", state.pc,
          OpRegistry::global().schema(op_site.op).name, jitReasonName(JitReason::NoKernel));
    return;
  }
  if (!state.backoff.mayRetry(heat.executions)) return;
  if (state.compiles == 0 && cheaperInterpreted(state.interpreted, {site}, vm_.runtime(function), level_)) return;
  const std::uint64_t misses = slot.guard_misses.load(std::memory_order_relaxed);
  bool retune = false;
  if (state.compiles > 0) {
    if (misses > state.misses_logged) logGuardMisses(function, site, state);
    const bool widen =
        misses - state.misses_at_request >= static_cast<std::uint64_t>(Tunables::get(Tunable::GuardMissRecompile));
    // O2: the default-parameter kernel serves until tuning it pays off (then it is recompiled tuned).
    retune = !widen && !state.tuned &&
             tuningPaysOff(ticksToNanos(slot.ticks.load(std::memory_order_relaxed)) * 1e-6 - state.installed_ms,
                           state.tune_cost_ms, state.tune_gain);
    if (!widen && !retune) return;
  }
  const std::vector<ProfileRecord> records = vm_.runtime(function).profiles[static_cast<std::size_t>(site)].snapshot();
  const ProfileRecord* target = newestRecord(records);
  if (target == nullptr) return;  // profiling is off: nothing to specialize for
  if (queue_.size() >= static_cast<std::size_t>(Tunables::get(Tunable::CompileQueue))) {
    ++stats_.dropped_requests;
    ++stats_.fallbacks[static_cast<std::size_t>(JitReason::QueueFull)];
    logAt(LogLevel::Info, "JIT", "Compile queue full ({}/{}), dropped request for PC=0x{:02X}; will retry", queue_.size(),
          Tunables::get(Tunable::CompileQueue), state.pc);
    return;
  }
  if (retune) {
    logAt(LogLevel::Info, "JIT", "Tuning the kernel at PC=0x{:02X} pays off now (estimated cost {:.0f}ms)", state.pc,
          state.tune_cost_ms);
  } else {
    logAt(LogLevel::Info, "JIT", "Hot path detected at PC=0x{:02X}, signature={}", state.pc,
          recordSignature(op_site.op, *target));
  }
  state.phase = Phase::Queued;
  state.misses_at_request = misses;
  queue_.push_back(Request{function, site, -1, retune});
  ++stats_.requests;
  trace::instant("jit", "compile queued",
                 trace::Args().addPc(state.pc).add("signature", recordSignature(op_site.op, *target)));
  logAt(LogLevel::Info, "JIT", "Compile queued for PC=0x{:02X} ({}/{} in queue)", state.pc, queue_.size(),
        Tunables::get(Tunable::CompileQueue));
  lock.unlock();
  queue_cv_.notify_all();  // compile and tuning threads wait on it: wake the right kind
}

void Jit::logGuardMisses(int function, int site, SiteState& state) {
  // Called with mutex_ held. Rate limit: the 1st, 2nd, 4th, 8th... miss at a site is logged; all are counted.
  DispatchSlot& slot = vm_.runtime(function).slots[static_cast<std::size_t>(site)];
  const std::uint64_t misses = slot.guard_misses.load(std::memory_order_relaxed);
  const std::uint64_t delta = misses - state.misses_logged;
  const std::vector<ProfileRecord> records = vm_.runtime(function).profiles[static_cast<std::size_t>(site)].snapshot();
  const ProfileRecord* target = newestRecord(records);
  JitReason reason = JitReason::Declined;
  std::string why = "the kernel declined the inputs";
  if (target != nullptr) {
    for (const Guard& guard : patches_->guards(function, site)) {
      JitReason r = JitReason::Declined;
      std::string text = guardMissReason(guard, *target, &r);
      if (text.empty()) {
        reason = JitReason::Declined;
        why = "the kernel declined the inputs";
        break;
      }
      reason = r;
      why = text;
    }
  }
  stats_.fallbacks[static_cast<std::size_t>(reason)] += delta;
  stats_.guard_misses += delta;
  // Logged at the 1st, 2nd, 4th, 8th... miss, or when the count more than doubled since the last check.
  if (std::has_single_bit(misses) || misses > 2 * state.misses_logged + 1) {
    logAt(LogLevel::Info, "JIT", "Guard miss at PC=0x{:02X}: {} ({}; {} misses so far, ran interpreted)", state.pc, why,
          jitReasonName(reason), misses);
  }
  state.misses_logged = misses;
}

void Jit::cancel() {
  // A finished program never waits for the JIT: queued requests are dropped, and the running one
  // stops at its next cancellation point (before an LLVM compile, between tuning candidates, inside
  // a timing loop) and leaves nothing behind; what already finished stays in the caches.
  cancel_.store(true, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    queue_.clear();
  }
  queue_cv_.notify_all();
  idle_cv_.notify_all();
}

bool Jit::waitStopped(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  return idle_cv_.wait_for(lock, timeout, [&] { return in_flight_ == 0; });
}

void Jit::waitIdle() {
  std::unique_lock<std::mutex> lock(mutex_);
  idle_cv_.wait(lock, [&] { return (queue_.empty() && in_flight_ == 0) || stopping_; });
}

// Two kinds of background thread share queue_: the compile thread(s) take first installs,
// widenings and first-sight requests at compile_nice (just below the interpreter: the first
// compiled call comes soon even on a busy host), the tuning thread takes Request::tune at
// tune_nice under its duty cycle (bounded CPU), so a long tuning never holds a first install
// back. Without a tuning thread (no tuner) the compile threads would take everything.
void Jit::workerLoop(bool tuning) {
  const CompileCancelScope cancellable(&cancel_);
  // Below the interpreter's priority (support/thread_pool.h says why SCHED_BATCH + nice).
  if (!lowerThreadPriority(static_cast<int>(Tunables::get(tuning ? Tunable::TuneNice : Tunable::CompileNice)))) {
    logAt(LogLevel::Info, "JIT", "Cannot lower the {} thread's priority; it runs at the interpreter's",
          tuning ? "tuning" : "compile");
  }
  // Tuning's duty cycle: after T ms of this thread's CPU on a tuning request, it starts no other
  // one for T * (100 - p) / p ms.
  Clock::time_point retune_after = Clock::now();
  static std::atomic<int> next_worker{0};
  trace::nameThread(tuning ? std::string("jit tune") : fmt::format("jit compile {}", next_worker.fetch_add(1)));
  const bool takes_compiles = !tuning;
  const bool takes_tunes = tuning || !tune_worker_;
  double idle_since_us = trace::nowUs();  // the "queued" span starts when this thread was free
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    auto next = queue_.end();
    while (!stopping_) {
      const bool may_tune = takes_tunes && Clock::now() >= retune_after;
      next = std::find_if(queue_.begin(), queue_.end(),
                          [&](const Request& r) { return r.tune ? may_tune : takes_compiles; });
      if (next != queue_.end()) break;
      const bool paused_tune = takes_tunes && !may_tune &&
                               std::any_of(queue_.begin(), queue_.end(), [](const Request& r) { return r.tune; });
      if (paused_tune) {
        queue_cv_.wait_until(lock, retune_after);
        continue;
      }
      if (queue_.empty() && in_flight_ == 0 && !scratch_released_) {
        // The JIT is idle: the pages validation and tuning kept for their next buffers go back.
        scratch_released_ = true;
        lock.unlock();
        CachingAllocator::global().releaseScratch();
        lock.lock();
        continue;
      }
      queue_cv_.wait(lock);
    }
    if (stopping_) break;
    Request request = *next;
    queue_.erase(next);
    ++in_flight_;
    scratch_released_ = false;
    lock.unlock();
    const double cpu_before = threadCpuMs();
    {
      const BusyCompileThread busy;  // kernel_threads=auto leaves this thread its core meanwhile
      const double queued_from = std::max(request.queued_us, idle_since_us);
      trace::complete("compile", "queued", queued_from, trace::nowUs() - queued_from);
      trace::Scope span("compile", request.tune ? "tune" : "compile");
      if (span.on())
        span.args().add("function", request.function).add("site", request.site).add("range", request.range);
      if (request.range >= 0) {
        compileRange(request);
      } else {
        compileSite(request);
      }
    }
    idle_since_us = trace::nowUs();
    if (request.tune) {
      const double duty = static_cast<double>(Tunables::get(Tunable::TuneDutyPercent));
      retune_after =
          Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double, std::milli>(
                             (threadCpuMs() - cpu_before) * (100.0 - duty) / duty));
    }
    lock.lock();
    --in_flight_;
    idle_cv_.notify_all();
  }
  idle_cv_.notify_all();
}

void Jit::recordFailure(int function, int site, JitReason reason, const std::string& why) {
  const SiteState snapshot = siteState(function, site);
  const Region& region = regions_[static_cast<std::size_t>(function)][static_cast<std::size_t>(snapshot.region)];
  const RegionHeat heat = measureRegion(region, vm_.runtime(function));
  std::lock_guard<std::mutex> lock(mutex_);
  SiteState& state = sites_[static_cast<std::size_t>(function)][static_cast<std::size_t>(site)];
  if (reason == JitReason::ValidationFailed) ++stats_.validation_failures;
  else ++stats_.compile_failures;
  ++stats_.fallbacks[static_cast<std::size_t>(reason)];
  const char* what = reason == JitReason::ValidationFailed ? "Validation failed" : "Compile failed";
  trace::instant("compile", "failure",
                 trace::Args().addPc(state.pc).add("reason", jitReasonName(reason)).add("why", why));
  const FailureBackoff::Verdict verdict = state.backoff.recordFailure(heat.executions);
  if (verdict.blacklisted) {
    state.phase = SiteState::Phase::Blacklisted;
    ++stats_.blacklisted_sites;
    logAt(LogLevel::Info, "JIT", "{} for PC=0x{:02X}: {}", what, state.pc, why);
    logAt(LogLevel::Info, "JIT", "Blacklisted PC=0x{:02X} after {} failures ({}); the site stays interpreted", state.pc,
          state.backoff.failures, jitReasonName(reason));
    return;
  }
  state.phase = state.compiles > 0 ? SiteState::Phase::Compiled : SiteState::Phase::Cold;
  state.misses_at_request = vm_.runtime(function).slots[static_cast<std::size_t>(site)].guard_misses.load(std::memory_order_relaxed);
  logAt(LogLevel::Info, "JIT", "{} for PC=0x{:02X}: {}; backing off {} executions ({})", what, state.pc, why,
        verdict.wait, jitReasonName(reason));
}

namespace {
// Rewrites a site's input tokens to the ranges `spec` was compiled for (Module::rewriteSiteToken).
void rewriteSiteTokens(Module& module, int function, int site, const KernelSpec& spec) {
  const OpSite& op_site = module.functions[static_cast<std::size_t>(function)].op_sites[static_cast<std::size_t>(site)];
  for (std::size_t i = 0; i < spec.inputs.size() && i < op_site.input_tokens.size(); ++i) {
    const TensorDescriptor current = module.tokenSnapshot(function, site, false, static_cast<int>(i));
    TensorDescriptor rewritten = rewriteToken(current, spec.inputs[i]);
    if (!(rewritten == current)) (void)module.rewriteSiteToken(function, site, false, static_cast<int>(i), rewritten);
  }
}
}  // namespace

void Jit::compileSite(const Request& request) {
  const std::int64_t delay = Tunables::get(Tunable::JitTestCompileDelayMs);
  for (std::int64_t slept = 0; slept < delay && !compileCancelled(); ++slept) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const int function = request.function;
  const int site = request.site;
  const Function& fn = vm_.module().functions[static_cast<std::size_t>(function)];
  const OpSite& op_site = fn.op_sites[static_cast<std::size_t>(site)];
  const Clock::time_point start = Clock::now();
  const double start_cpu_ms = threadCpuMs();
  const double queued_ms = std::max(0.0, (trace::nowUs() - request.queued_us) * 1e-3);
  const SiteState before = siteState(function, site);

  // 1. Shape inference from the profile; on first sight the shapes the earlier process had met
  //    join it, so the spec (and its kernel-cache and tuning-database keys) is the one it installed.
  std::vector<ProfileRecord> records = request.warm_records != nullptr
                                           ? request.warm_records->front()
                                           : vm_.runtime(function).profiles[static_cast<std::size_t>(site)].snapshot();
  if (request.first_sight && request.warm_records == nullptr) {
    std::set<std::string> recorded;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      const InstallRecord& record = install_records_[static_cast<std::size_t>(function)].record;
      if (auto it = record.sites.find(site); it != record.sites.end() && !it->second.sigs.empty()) {
        recorded = it->second.sigs.front();
      }
    }
    addRecordedShapes(records, recorded);
  }
  auto inferred = inferSpec(op_site.op, op_site.attrs, records, before.compiles);
  auto settle = [&](SiteState::Phase phase) {
    std::lock_guard<std::mutex> lock(mutex_);
    sites_[static_cast<std::size_t>(function)][static_cast<std::size_t>(site)].phase = phase;
  };
  if (!inferred) {
    settle(before.compiles > 0 ? SiteState::Phase::Compiled : SiteState::Phase::Cold);
    return;
  }
  // Already covered (the misses came from shapes an entry installed meanwhile admits)?
  if (const ProfileRecord* target = request.tune ? nullptr : newestRecord(records)) {
    for (const Guard& guard : patches_->guards(function, site)) {
      if (guardMissReason(guard, *target, nullptr).empty()) {
        settle(SiteState::Phase::Compiled);
        return;
      }
    }
  }
  const double infer_ms = msSince(start);
  const double infer_cpu_ms = threadCpuMs() - start_cpu_ms;
  trace::completeSince("compile", "shape inference", start, trace::Args().add("signature", inferred->spec.signature()));

  // 2. Code generation.
  const KernelFamily* family = familyFor(op_site.op);
  if (Status supported = family->supports(inferred->spec); !supported.isOk()) {
    settle(SiteState::Phase::Unsupported);
    logAt(LogLevel::Info, "JIT", "Fallback at PC=0x{:02X}: {} is not supported by the {} kernels: {} ({}); it stays interpreted",
          before.pc, inferred->spec.signature(), family->name(), supported.message(), jitReasonName(JitReason::Unsupported));
    return;
  }
  // 2a. O2: the AutoTuner picks the kernel's parameters (from its database or by timing).
  //     At once when that costs nothing (a database hit), was asked for (the re-tune request) or
  //     pay-off waiting is off; otherwise the default-parameter kernel is installed first.
  TuneOutcome tuned;
  double tuning_cpu_ms = 0;
  const bool tuner = level_ >= 2 && options_.tuner != nullptr;
  const bool tune_now = tuner && (request.tune || !payoffWaits() ||
                                  options_.tuner->estimate(*engine_, *family, inferred->spec, 1.0).cost_ms <= 0);
  if (tune_now) {
    const Clock::time_point tune_start = Clock::now();
    const double tune_start_cpu_ms = threadCpuMs();
    tuned = tuneSpec(*family, inferred->spec, inferred->observed, before.pc);
    tuning_cpu_ms = threadCpuMs() - tune_start_cpu_ms;
    inferred->spec.params = tuned.params;
    trace::completeSince("compile", "tuning", tune_start, trace::Args().add("params", tuned.params.toString()));
  }
  const Clock::time_point codegen_start = Clock::now();
  const double codegen_start_cpu_ms = threadCpuMs();
  // O1 (nothing tuned): a matmul the library computes is installed as the library kernel first;
  // the generated one is the fallback when it does not compile or validate.
  const KernelSpec generated_spec = inferred->spec;
  bool library_first = false;
  if (level_ == 1 && !tune_now) {
    if (std::optional<KernelParams> library = untunedLibraryParams(*engine_, *family, inferred->spec)) {
      inferred->spec.params = *library;
      library_first = true;
    }
  }
  // The program's calls (a library matmul's profiled row counts and layouts): an untuned library
  // kernel whose layout would first need a library's one-time code generation does not compile
  // (ProgramCalls::avoid_one_time_codegen), so the generated kernel installs instead; validation
  // below prepares the library's primitives for them.
  ProgramCalls program_calls;
  program_calls.defer_creation = true;
  if (op_site.op == OpId::MatMul) program_calls.addMatmul(records);
  program_calls.avoid_one_time_codegen = library_first;
  auto kernel = [&] {
    const ProgramCallsScope scope(program_calls);
    return compileKernel(*engine_, *family, inferred->spec);
  }();
  program_calls.avoid_one_time_codegen = false;
  if (!kernel && library_first) {
    logAt(LogLevel::Info, "JIT",
          "PC=0x{:02X}: the library kernel for {} did not compile ({}); compiling the generated one", before.pc,
          inferred->spec.signature(), kernel.status().message());
    inferred->spec = generated_spec;
    library_first = false;
    kernel = compileKernel(*engine_, *family, inferred->spec);
  }
  double codegen_ms = msSince(codegen_start);
  double codegen_cpu_ms = threadCpuMs() - codegen_start_cpu_ms;
  trace::completeSince("compile", "codegen", codegen_start, trace::Args().add("signature", inferred->spec.signature()));
  if (compileCancelled()) {  // shutdown: no install, no failure recorded
    if (kernel) (void)engine_->free((*kernel)->handle);
    return;
  }
  if (!kernel) {
    recordFailure(function, site, JitReason::CodegenFailed, kernel.status().toString());
    return;
  }
  (*kernel)->corrupt_outputs = Tunables::get(Tunable::JitTestCorruptKernels) != 0;

  // 3. Validation against the reference kernel, then the patch.
  const Clock::time_point validate_start = Clock::now();
  const double validate_start_cpu_ms = threadCpuMs();
  const double library_codegen_before_ms = engine_->threadLibraryCodegenMs();
  const std::uint64_t seed = (static_cast<std::uint64_t>(function) << 40) ^ (static_cast<std::uint64_t>(site) << 20) ^
                             static_cast<std::uint64_t>(before.compiles * 7919 + before.backoff.failures * 104729) ^
                             static_cast<std::uint64_t>(Clock::now().time_since_epoch().count());
  // Validation on this thread also prepares a library matmul's primitives for the program's calls
  // at the profiled shapes, created once it passed, before the install (counted as codegen below,
  // not validation), so the program never creates one.
  const ProgramCallsScope program_calls_scope(program_calls);
  // The kernel's own spec: a kept kernel for wider ranges is validated and guarded on those.
  Status valid = validateKernel(**kernel, validationShapes((*kernel)->spec, inferred->observed), seed);
  if (!valid.isOk()) program_calls.dropDeferred();
  if (!valid.isOk() && (*kernel)->from_cache && !(*kernel)->corrupt_outputs) {
    // A cached kernel that fails validation was dropped from the cache: compile it afresh now.
    (void)engine_->free((*kernel)->handle);
    kernel = compileKernel(*engine_, *family, inferred->spec);
    if (!kernel) {
      recordFailure(function, site, JitReason::CodegenFailed, kernel.status().toString());
      return;
    }
    valid = validateKernel(**kernel, validationShapes((*kernel)->spec, inferred->observed), seed);
    if (!valid.isOk()) program_calls.dropDeferred();
  }
  if (!valid.isOk() && library_first && !(*kernel)->corrupt_outputs) {
    // The library kernel failed (oneDNN cannot run this problem here): the generated one instead.
    logAt(LogLevel::Info, "JIT",
          "PC=0x{:02X}: the library kernel for {} failed validation ({}); compiling the generated one", before.pc,
          inferred->spec.signature(), valid.message());
    (void)engine_->free((*kernel)->handle);
    inferred->spec = generated_spec;
    kernel = compileKernel(*engine_, *family, inferred->spec);
    if (!kernel) {
      recordFailure(function, site, JitReason::CodegenFailed, kernel.status().toString());
      return;
    }
    valid = validateKernel(**kernel, validationShapes((*kernel)->spec, inferred->observed), seed);
  }
  if (!valid.isOk()) {
    (void)engine_->free((*kernel)->handle);
    recordFailure(function, site, JitReason::ValidationFailed, valid.message());
    return;
  }
  program_calls.createDeferred();
  const std::string symbol = (*kernel)->handle.symbol;
  const bool from_cache = (*kernel)->from_cache;
  inferred->spec = (*kernel)->spec;
  const int entries = patches_->install(function, site, guardFor(inferred->spec), std::move(*kernel));
  rewriteSiteTokens(*vm_.sharedModule(), function, site, inferred->spec);
  // Library primitives created by the validation runs (a new shape's first call) are codegen.
  const double library_codegen_ms = engine_->threadLibraryCodegenMs() - library_codegen_before_ms;
  const double validate_ms = std::max(0.0, msSince(validate_start) - library_codegen_ms);
  const double validate_cpu_ms = std::max(0.0, threadCpuMs() - validate_start_cpu_ms - library_codegen_ms);
  codegen_ms += library_codegen_ms;
  codegen_cpu_ms += library_codegen_ms;
  trace::completeSince("compile", "validation + install", validate_start);
  trace::instant("compile", "install",
                 trace::Args().addPc(before.pc).add("signature", inferred->spec.signature()).add("kernel", symbol));
  const double total_ms = msSince(start);
  const double cpu_ms = threadCpuMs() - start_cpu_ms;
  const TuneEstimate estimate = tuner && !tune_now
                                    ? options_.tuner->estimate(*engine_, *family, inferred->spec, codegen_cpu_ms)
                                    : TuneEstimate{0.0, 0.0};
  const double site_ms =
      ticksToNanos(vm_.runtime(function).slots[static_cast<std::size_t>(site)].ticks.load(std::memory_order_relaxed)) *
      1e-6;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    SiteState& state = sites_[static_cast<std::size_t>(function)][static_cast<std::size_t>(site)];
    state.phase = SiteState::Phase::Compiled;
    if (!request.tune) ++state.compiles;
    state.tuned = estimate.cost_ms <= 0;
    state.installed_ms = site_ms;
    state.tune_cost_ms = estimate.cost_ms;
    state.tune_gain = estimate.gain;
    ++stats_.compiles;
    if (request.first_sight) ++stats_.first_sight_installs;
    CompileEvent event{inferred->spec.signature(),
                       std::chrono::duration<double, std::milli>(start - attached_at_).count(),
                       infer_ms,
                       codegen_ms,
                       validate_ms,
                       tuned.tuning_ms,
                       tuned.from_database};
    event.queued_ms = queued_ms;
    event.total_ms = total_ms;
    event.cpu_ms = cpu_ms;
    event.shape_infer_cpu_ms = infer_cpu_ms;
    event.codegen_cpu_ms = codegen_cpu_ms;
    event.validate_patch_cpu_ms = validate_cpu_ms;
    event.tuning_cpu_ms = tuning_cpu_ms;
    noteEvent(event);
    noteTuning(tuned);
  }
  logAt(LogLevel::Info, "JIT", "Kernel generated in {}ms, replaced dispatch entry", static_cast<long long>(total_ms + 0.5));
  logAt(LogLevel::Info, "JIT",
        "Installed {} at PC=0x{:02X} for {} ({}; {} dispatch {}; shape inference {:.1f}ms, codegen {:.1f}ms, "
        "validation+patch {:.1f}ms, {:.1f}ms compile-thread CPU)",
        symbol, before.pc, inferred->spec.signature(), inferred->policy, entries, entries == 1 ? "entry" : "entries",
        infer_ms, codegen_ms, validate_ms, validate_cpu_ms);
  logAt(LogLevel::Info, "JIT",
        "PC=0x{:02X} compile CPU {:.1f}ms (shape inference {:.1f}ms, codegen {:.1f}ms, validation+patch {:.1f}ms, "
        "tuning {:.1f}ms); queued {:.1f}ms, compiling {:.1f}ms wall",
        before.pc, cpu_ms, infer_cpu_ms, codegen_cpu_ms, validate_cpu_ms, tuning_cpu_ms, queued_ms, total_ms);
  if (request.first_sight) {
    logAt(LogLevel::Info, "JIT", "PC=0x{:02X} installed from the cache on first sight ({})", before.pc,
          from_cache ? "code from the kernel cache" : "the cache lacked the code: compiled");
  }
  // The install record lists the profiled shapes this kernel's guard admits.
  std::set<std::string> sigs;
  const Guard installed = guardFor(inferred->spec);
  for (const ProfileRecord& record : records) {
    if (guardMissReason(installed, record, nullptr).empty()) sigs.insert(record.toString());
  }
  if (!sigs.empty()) recordInstall(function, site, false, site, tune_now, {std::move(sigs)});
}

TuneOutcome Jit::tuneSpec(const KernelFamily& family, const KernelSpec& spec, std::span<const Shape> observed, int pc) {
  TuneOutcome none;
  if (family.searchSpace(engine_->targetSpec(spec)).empty()) return none;
  auto examples = randomInputs(spec, observed, 0x5eed ^ static_cast<std::uint64_t>(pc));
  if (!examples) return none;
  std::vector<const Value*> pointers;
  for (const Value& v : *examples) pointers.push_back(&v);
  auto outcome = options_.tuner->tune(*engine_, family, spec, pointers);
  if (!outcome) {
    logAt(LogLevel::Info, "JIT", "Tuning {} at PC=0x{:02X} failed ({}); compiling with default parameters",
          spec.signature(), pc, outcome.status().message());
    return none;
  }
  if (outcome->from_database) {
    logAt(LogLevel::Info, "JIT", "Tuning cache hit for {} at PC=0x{:02X}: {}", spec.signature(), pc,
          outcome->params.toString());
  } else if (outcome->timed > 0) {
    logAt(LogLevel::Info, "JIT", "Tuned {} at PC=0x{:02X} in {:.0f}ms: {} of {} candidates timed ({} failed), chose {} "
          "({:.1f}us vs default {:.1f}us)", spec.signature(), pc, outcome->tuning_ms, outcome->timed, outcome->candidates,
          outcome->failed, outcome->params.toString(), outcome->best_us, outcome->default_us);
  }
  return *outcome;
}

void Jit::noteEvent(const CompileEvent& event) {
  stats_.shape_infer_cpu_ms += event.shape_infer_cpu_ms;
  stats_.codegen_cpu_ms += event.codegen_cpu_ms;
  stats_.validate_patch_cpu_ms += event.validate_patch_cpu_ms;
  stats_.tuning_cpu_ms += event.tuning_cpu_ms;
  stats_.compile_ms.push_back(event.total_ms);
  stats_.compile_cpu_ms.push_back(event.cpu_ms);
  stats_.events.push_back(event);
}

void Jit::noteTuning(const TuneOutcome& tuned) {
  stats_.tuning_ms += tuned.tuning_ms;
  if (tuned.from_database) ++stats_.tuning_cache_hits;
  else if (tuned.timed > 0) ++stats_.tuned_kernels;
}

bool Jit::coveredByRange(int function, int site) const {
  for (const RangeState& state : ranges_[static_cast<std::size_t>(function)]) {
    // A range whose compile is deferred (regionCompilePaysOff) holds its sites back with it.
    const bool deferred = state.phase == RangeState::Phase::Cold && state.deferred;
    if (state.phase != RangeState::Phase::Queued && state.phase != RangeState::Phase::Installed && !deferred) continue;
    if (state.phase == RangeState::Phase::Installed &&
        state.declines->load(std::memory_order_relaxed) - state.declines_at_request > 0) {
      continue;  // the region declines some inputs: its ops need their own kernels
    }
    if (std::find(state.range.sites.begin(), state.range.sites.end(), site) != state.range.sites.end()) return true;
  }
  return false;
}

void Jit::considerRange(int function, int range, const RegionHeat& heat, bool early) {
  std::unique_lock<std::mutex> lock(mutex_);
  RangeState& state = ranges_[static_cast<std::size_t>(function)][static_cast<std::size_t>(range)];
  using Phase = RangeState::Phase;
  if (state.phase == Phase::Queued || state.phase == Phase::NotFused || state.phase == Phase::Blacklisted) return;
  if (early) {
    // Not hot yet: only a first compile whose interpreted time already repays it.
    if (state.phase != Phase::Cold || state.compiles != 0 || state.backoff.failures != 0) return;
    if (!earlyCompilePaysOff(function, state)) return;
  } else {
    if (!state.backoff.mayRetry(heat.executions)) return;
    if (state.compiles == 0 &&
        cheaperInterpreted(state.interpreted, state.range.sites, vm_.runtime(function), level_)) {
      return;
    }
    if (state.compiles == 0 && !regionCompilePaysOff(function, state)) return;  // interpreted until compiling pays off
  }
  const std::uint64_t declines = state.declines->load(std::memory_order_relaxed);
  bool tune = false;
  if (state.phase == Phase::Installed) {
    // New shapes the region's kernels do not cover: recompile for the wider range (capped).
    // Otherwise, once: tune the installed region's kernels in the background (the untuned
    // region serves meanwhile, so tuning never delays the first compiled execution).
    const bool widen = declines - state.declines_at_request >= static_cast<std::uint64_t>(Tunables::get(Tunable::GuardMissRecompile)) &&
                       state.compiles <= Tunables::get(Tunable::MaxRecompiles);
    tune = !widen && !state.tuned && level_ >= 2 && options_.tuner != nullptr;
    if (tune && !tuningPaysOff(sitesMilliseconds(state.range.sites, vm_.runtime(function)) - state.installed_ms,
                               state.tune_cost_ms, state.tune_gain)) {
      return;  // deferred: the untuned region keeps serving
    }
    if (!widen && !tune) return;
  }
  const Function& fn = vm_.module().functions[static_cast<std::size_t>(function)];
  // The log's signature is the region's dominant op with its shapes: its matmul (the most time of
  // them while interpreted), else the op with the most time.
  std::string signature, ops;
  std::uint64_t dominant_ticks = 0;
  bool dominant_matmul = false;
  for (std::size_t k = 0; k < state.range.sites.size(); ++k) {
    const auto site_index = static_cast<std::size_t>(state.range.sites[k]);
    const OpSite& site = fn.op_sites[site_index];
    const std::vector<ProfileRecord> records = vm_.runtime(function).profiles[site_index].snapshot();
    const ProfileRecord* newest = newestRecord(records);
    if (newest == nullptr) return;  // not profiled (yet): nothing to specialize for
    ops += (k ? "+" : "") + std::string(opIdent(site.op));
    const std::uint64_t ticks = vm_.runtime(function).slots[site_index].ticks.load(std::memory_order_relaxed);
    const bool matmul = site.op == OpId::MatMul;
    if (signature.empty() || (matmul && !dominant_matmul) || (matmul == dominant_matmul && ticks > dominant_ticks)) {
      signature = recordSignature(site.op, *newest);
      dominant_ticks = ticks;
      dominant_matmul = matmul;
    }
  }
  if (queue_.size() >= static_cast<std::size_t>(Tunables::get(Tunable::CompileQueue))) {
    ++stats_.dropped_requests;
    ++stats_.fallbacks[static_cast<std::size_t>(JitReason::QueueFull)];
    return;
  }
  if (!tune) {
    logAt(LogLevel::Info, "JIT", "Hot path detected at PC=0x{:02X}, signature={}", state.range.start_pc, signature);
    logAt(LogLevel::Info, "JIT", "Region at PC=0x{:02X}..0x{:02X}: {} ops: {}", state.range.start_pc,
          state.range.resume_pc - 1, state.range.sites.size(), ops);
  }
  if (tune && state.tune_cost_ms > 0) {
    logAt(LogLevel::Info, "JIT",
          "Tuning the region at PC=0x{:02X} pays off now: {:.0f}ms run since its install x expected "
          "gain {:.0f}% >= estimated tuning cost {:.0f}ms",
          state.range.start_pc, sitesMilliseconds(state.range.sites, vm_.runtime(function)) - state.installed_ms,
          state.tune_gain * 100, state.tune_cost_ms);
  }
  state.phase = Phase::Queued;
  state.declines_at_request = declines;
  queue_.push_back(Request{function, state.range.sites[0], range, tune});
  ++stats_.requests;
  trace::instant("jit", tune ? "tune queued" : "compile queued",
                 trace::Args().addPc(state.range.start_pc).add("signature", signature).add("ops", ops));
  lock.unlock();
  queue_cv_.notify_all();  // compile and tuning threads wait on it: wake the right kind
}

void Jit::compileRange(const Request& request) {
  const int function = request.function;
  const Clock::time_point start = Clock::now();
  const double start_cpu_ms = threadCpuMs();
  const double queued_ms = std::max(0.0, (trace::nowUs() - request.queued_us) * 1e-3);
  RangeState snapshot;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    snapshot = ranges_[static_cast<std::size_t>(function)][static_cast<std::size_t>(request.range)];
  }
  const Function& fn = vm_.module().functions[static_cast<std::size_t>(function)];
  std::vector<std::vector<ProfileRecord>> records;
  if (request.warm_records != nullptr) records = *request.warm_records;  // warmStart: rebuilt, complete
  for (std::size_t k = records.size(); k < snapshot.range.sites.size(); ++k) {
    records.push_back(vm_.runtime(function).profiles[static_cast<std::size_t>(snapshot.range.sites[k])].snapshot());
  }
  const std::vector<std::vector<ProfileRecord>> profiled = records;
  bool augmented = false;
  // Only where every member's operands are tensors: a record rebuilt from a signature keeps this
  // run's non-tensor operands (a Reshape's target), which need not fit the recorded shapes.
  const bool tensors_only = std::all_of(records.begin(), records.end(), [](const std::vector<ProfileRecord>& member) {
    const ProfileRecord* newest = newestRecord(member);
    return newest != nullptr && std::all_of(newest->inputs.begin(), newest->inputs.end(),
                                            [](const OperandProfile& operand) { return operand.is_tensor; });
  });
  if (request.first_sight && tensors_only && request.warm_records == nullptr) {
    // The shapes the earlier process had met join the profile, so the plan and its kernels are
    // the ones it installed (and kept in the kernel cache), not a narrower plan for one shape.
    InstallRecord::Entry recorded;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      const InstallRecord& record = install_records_[static_cast<std::size_t>(function)].record;
      if (auto it = record.ranges.find(request.range); it != record.ranges.end()) recorded = it->second;
    }
    for (std::size_t k = 0; k < records.size() && k < recorded.sigs.size(); ++k) {
      augmented = addRecordedShapes(records[k], recorded.sigs[k]) || augmented;
    }
  }
  std::vector<TuneOutcome> tuning;
  RegionCompileTimes times;
  // On first sight a range the record says was tuned takes its parameters from the database now.
  const bool tune = request.tune || (request.first_sight && request.tuned_hint);
  const std::uint64_t codegens_before = engine_->codegens();
  // On first sight the planning run comes from the last process that installed this range the
  // same way, when it kept it for the same inputs (install_record.h), and is kept for the next.
  std::optional<ReferenceRunStore> kept_run;
  KernelCache* cache = engine_->kernelCache();
  if (request.first_sight && cache != nullptr && !cache->directory().empty()) {
    std::lock_guard<std::mutex> lock(mutex_);
    const FunctionRecord& entry = install_records_[static_cast<std::size_t>(function)];
    if (!entry.file.empty())
      kept_run.emplace(*cache, ReferenceRunStore::fileName(entry.record.identity, request.range));
  }
  auto region = compileRegion(*engine_, vm_.module(), fn, snapshot.range,
                              *liveness_[static_cast<std::size_t>(function)], records, snapshot.compiles,
                              tune ? options_.tuner : nullptr, &tuning, &times, kept_run ? &*kept_run : nullptr);
  if (!region && augmented && !compileCancelled()) {
    // The recorded shapes do not plan together with this run's operands (a record rebuilt from a
    // signature keeps this run's non-tensor operands): plan for what this process profiled.
    records = profiled;
    tuning.clear();
    times = RegionCompileTimes{};
    region = compileRegion(*engine_, vm_.module(), fn, snapshot.range, *liveness_[static_cast<std::size_t>(function)],
                           records, snapshot.compiles, tune ? options_.tuner : nullptr, &tuning, &times,
                           kept_run ? &*kept_run : nullptr);
  }
  if (compileCancelled()) {  // shutdown: drop whatever was compiled; no install, no failure recorded
    if (region) {
      for (KernelHandle* handle : (*region)->handles()) (void)engine_->free(*handle);
    }
    return;
  }
  double tuning_ms = 0;
  bool all_from_database = !tuning.empty();
  for (const TuneOutcome& outcome : tuning) {
    tuning_ms += outcome.tuning_ms;
    all_from_database = all_from_database && outcome.from_database;
  }
  const double total_ms = msSince(start);
  // The compile thread's CPU and its helpers' (the region's kernels compiled in parallel).
  const double cpu_ms = threadCpuMs() - start_cpu_ms + times.helper_cpu_ms;
  TuneEstimate estimate;
  double ran_ms = 0;
  if (region && !request.tune) {
    estimate = estimateTuning(**region, times.codegen_cpu_ms);
    ran_ms = sitesMilliseconds(snapshot.range.sites, vm_.runtime(function));
  }
  std::unique_lock<std::mutex> lock(mutex_);
  RangeState& state = ranges_[static_cast<std::size_t>(function)][static_cast<std::size_t>(request.range)];
  using Phase = RangeState::Phase;
  if (!region) {
    trace::instant("compile", "failure",
                   trace::Args().addPc(snapshot.range.start_pc).add("reason", region.status().message()));
  }
  if (!region && request.tune) {
    state.phase = Phase::Installed;
    state.tuned = true;  // keep the untuned region; do not retry
    logAt(LogLevel::Info, "JIT", "Tuning the region at PC=0x{:02X} failed: {}; the untuned region stays", snapshot.range.start_pc,
          region.status().message());
    return;
  }
  if (!region) {
    const bool unsupported = region.status().code() == ErrorCode::Unsupported;
    if (unsupported && request.first_sight && state.compiles == 0) {
      // Early, on what the first runs profiled: the usual tier-up plans again from the full profile.
      state.phase = Phase::Cold;
      logAt(LogLevel::Info, "JIT", "First sight: region at PC=0x{:02X} not planned yet: {}; it takes the usual tier-up",
            snapshot.range.start_pc, region.status().message());
      return;
    }
    if (unsupported) {
      state.phase = state.compiles > 0 ? Phase::Installed : Phase::NotFused;
      logAt(LogLevel::Info, "JIT", "Region at PC=0x{:02X}..0x{:02X} not fused: {} ({}); its ops compile one by one",
            snapshot.range.start_pc, snapshot.range.resume_pc - 1, region.status().message(), jitReasonName(JitReason::Unsupported));
      return;
    }
    const bool validation = region.status().message().find("disagrees") != std::string::npos;
    ++(validation ? stats_.validation_failures : stats_.compile_failures);
    const JitReason reason = validation ? JitReason::ValidationFailed : JitReason::CodegenFailed;
    ++stats_.fallbacks[static_cast<std::size_t>(reason)];
    const Region& hot = regions_[static_cast<std::size_t>(function)][static_cast<std::size_t>(snapshot.region)];
    const FailureBackoff::Verdict verdict =
        state.backoff.recordFailure(measureRegion(hot, vm_.runtime(function)).executions);
    if (verdict.blacklisted) {
      state.phase = Phase::Blacklisted;
      ++stats_.blacklisted_sites;
      logAt(LogLevel::Info, "JIT",
            "Blacklisted region at PC=0x{:02X} after {} failures ({}): {}; its ops compile one by one",
            snapshot.range.start_pc, state.backoff.failures, jitReasonName(reason), region.status().message());
      return;
    }
    state.phase = state.compiles > 0 ? Phase::Installed : Phase::Cold;
    logAt(LogLevel::Info, "JIT", "{} for region at PC=0x{:02X}: {}; backing off {} executions ({})",
          validation ? "Validation failed" : "Compile failed", snapshot.range.start_pc, region.status().message(),
          verdict.wait, jitReasonName(reason));
    return;
  }
  (*region)->decline_counter = state.declines;
  (*region)->run_counter = state.runs;
  (*region)->row_block_counter = state.row_blocked;
  (*region)->opaque_fallback_counter = state.opaque_fallbacks;
  const std::string description = (*region)->describe();
  const int kernels = (*region)->kernels();
  const int fused = (*region)->fusedOps();
  const int entries = patches_->installRegion(function, snapshot.range.sites[0], std::move(*region));
  // The module shows what the region was compiled for: each op's input tokens get the ranges the
  // shape inference gives its profile (what `run --dump` writes at O2).
  for (std::size_t k = 0; k < snapshot.range.sites.size(); ++k) {
    const OpSite& op_site = fn.op_sites[static_cast<std::size_t>(snapshot.range.sites[k])];
    auto inferred = inferSpec(op_site.op, op_site.attrs, records[k], snapshot.compiles);
    if (inferred) rewriteSiteTokens(*vm_.sharedModule(), function, snapshot.range.sites[k], inferred->spec);
  }
  trace::instant("compile", "install", trace::Args().addPc(snapshot.range.start_pc).add("kernel", description));
  state.phase = Phase::Installed;
  if (!request.tune) {
    if (kernels > 0) compile_ms_per_kernel_ = cpu_ms / kernels;  // what the next region's deferral expects
    ++state.compiles;
    state.installed_ms = ran_ms;
    state.tune_cost_ms = estimate.cost_ms;
    state.tune_gain = estimate.gain;
  }
  state.tuned = request.tune || (tune && options_.tuner != nullptr && !tuning.empty());
  const bool state_tuned = state.tuned;
  state.description = description;
  state.declines_at_request = state.declines->load(std::memory_order_relaxed);
  ++stats_.compiles;
  if (request.first_sight) ++stats_.first_sight_installs;
  if (!request.tune) {
    ++stats_.fused_regions;
    stats_.fused_ops += static_cast<std::uint64_t>(fused);
  }
  // Patching is part of validation+patch; tuning is reported on its own.
  const double validate_patch_ms = total_ms - times.plan_ms - times.codegen_ms - tuning_ms;
  stats_.shape_infer_ms += times.plan_ms;
  stats_.codegen_ms += times.codegen_ms;
  stats_.validate_patch_ms += validate_patch_ms;
  for (const TuneOutcome& outcome : tuning) noteTuning(outcome);
  CompileEvent event{fmt::format("Region@0x{:02X}{}", snapshot.range.start_pc, request.tune ? " (tuned)" : ""),
                     std::chrono::duration<double, std::milli>(start - attached_at_).count(),
                     times.plan_ms,
                     times.codegen_ms,
                     validate_patch_ms,
                     tuning_ms,
                     all_from_database};
  event.region = true;
  event.kernels = kernels;
  event.queued_ms = queued_ms;
  event.total_ms = total_ms;
  event.cpu_ms = cpu_ms;
  event.helper_cpu_ms = times.helper_cpu_ms;
  event.shape_infer_cpu_ms = times.plan_cpu_ms;
  event.codegen_cpu_ms = times.codegen_cpu_ms;
  event.tuning_cpu_ms = times.tuning_cpu_ms;
  event.validate_patch_cpu_ms = std::max(0.0, cpu_ms - times.plan_cpu_ms - times.codegen_cpu_ms - times.tuning_cpu_ms);
  noteEvent(event);
  lock.unlock();
  if (!request.tune) logAt(LogLevel::Info, "JIT", "Kernel generated in {}ms, replaced dispatch entry", static_cast<long long>(total_ms + 0.5));
  logAt(
      LogLevel::Info, "JIT",
      "Installed {}fused region at PC=0x{:02X}..0x{:02X} ({} kernels, {} ops fused: {}; {} region {}; tuning {:.1f}ms; "
      "{:.1f}ms wall, {:.1f}ms compile-thread CPU)",
      request.tune ? "tuned " : "", snapshot.range.start_pc, snapshot.range.resume_pc - 1, kernels, fused, description,
      entries, entries == 1 ? "entry" : "entries", tuning_ms, total_ms, cpu_ms - times.helper_cpu_ms);
  logAt(
      LogLevel::Info, "JIT",
      "Region at PC=0x{:02X} compile CPU {:.1f}ms, {:.1f}ms of it on helper threads (plan {:.1f}ms, codegen {:.1f}ms, "
      "tuning {:.1f}ms, validation+patch {:.1f}ms); queued {:.1f}ms",
      snapshot.range.start_pc, cpu_ms, times.helper_cpu_ms, event.shape_infer_cpu_ms, event.codegen_cpu_ms,
      event.tuning_cpu_ms, event.validate_patch_cpu_ms, queued_ms);
  if (request.first_sight) {
    // Process-wide count: another compile thread may have run codegen meanwhile (then it reads high).
    const std::uint64_t codegens = engine_->codegens() - codegens_before;
    logAt(LogLevel::Info, "JIT",
          "Region at PC=0x{:02X} installed from the cache on first sight ({} LLVM codegens; planning run {})",
          snapshot.range.start_pc, codegens, times.reference_kept ? "kept by an earlier process" : "run");
  }
  std::vector<std::set<std::string>> sigs(records.size());
  for (std::size_t k = 0; k < records.size(); ++k) {
    for (const ProfileRecord& record : records[k]) sigs[k].insert(record.toString());
  }
  recordInstall(function, request.range, true, snapshot.range.sites[0], state_tuned, std::move(sigs));
}

bool Jit::payoffWaits() const {
  return !options_.wait_for_compiles && Tunables::get(Tunable::TunePayoff) != 0;
}

// A fused range's first compile is worth starting once its interpreted time repays the estimated
// compile cost (hot_path.h: compilePaysOff); logged when it is first held back and when it starts.
double Jit::regionCompileCostMs(int function, const RangeState& state, int& spare_cores) {
  const auto prior_ms = static_cast<double>(Tunables::get(Tunable::CompilePayoffMs));
  spare_cores = 0;
  if (!payoffWaits() || level_ < 2 || prior_ms <= 0 || Tunables::get(Tunable::HotMs) <= 0) return -1.0;
  // A core of this process's own that neither the interpreter nor a busy compile thread holds:
  // the compile runs beside the program, and only a fraction of its cost is the program's.
  spare_cores = availableCores() - 1 - busyCompileThreads();
  double per_kernel_ms = compile_ms_per_kernel_;
  if (per_kernel_ms < 0) {
    if (kernel_cache_warm_ < 0) {
      const KernelCache* cache = engine_->kernelCache();
      kernel_cache_warm_ = cache != nullptr && cache->stats().entries > 0 ? 1 : 0;
    }
    per_kernel_ms = prior_ms * (kernel_cache_warm_ == 1 ? kWarmCacheCostFraction : 1.0);
  }
  const Function& fn = vm_.module().functions[static_cast<std::size_t>(function)];
  return countedCompileCost(per_kernel_ms * estimatedRegionKernels(fn, state.range.sites), spare_cores);
}

bool Jit::earlyCompilePaysOff(int function, RangeState& state) {
  int spare_cores = 0;
  const double cost_ms = regionCompileCostMs(function, state, spare_cores);
  if (cost_ms <= 0) return false;
  const FunctionRuntime& runtime = vm_.runtime(function);
  const double ran_ms = sitesMilliseconds(state.range.sites, runtime);
  const double mean_ns = sitesMeanNanos(state.range.sites, runtime);
  if (!paysOffBeforeHot(ran_ms, mean_ns, cost_ms) || tinyOperandSites(state.range.sites, runtime)) return false;
  const std::uint64_t calls =
      runtime.slots[static_cast<std::size_t>(state.range.sites.front())].calls.load(std::memory_order_relaxed);
  logAt(LogLevel::Info, "JIT",
        "Compiling the region at PC=0x{:02X} before it is hot (hot_count {}): its {} runs took {:.0f}ms "
        "interpreted ({:.1f}ms each) x expected gain {:.0f}% >= estimated compile cost {:.0f}ms{}",
        state.range.start_pc, Tunables::get(Tunable::HotCount), calls, ran_ms, mean_ns * 1e-6, kCompiledGain * 100,
        cost_ms, spare_cores > 0 ? " (a quarter of it: a core is spare)" : "");
  ++stats_.early_compiles;
  state.deferred = false;
  return true;
}

bool Jit::regionCompilePaysOff(int function, RangeState& state) {
  int spare_cores = 0;
  const double cost_ms = regionCompileCostMs(function, state, spare_cores);
  if (cost_ms < 0) return true;
  const char* spare_note = spare_cores > 0 ? " (a quarter of it: a core is spare)" : "";
  const double ran_ms = sitesMilliseconds(state.range.sites, vm_.runtime(function));
  if (ran_ms <= 0) return true;  // not timed (profiling off): no evidence to wait on
  const bool pays = compilePaysOff(ran_ms, cost_ms);
  if (!pays && !state.deferred) {
    logAt(LogLevel::Info, "JIT",
          "Compiling the region at PC=0x{:02X} is deferred: {:.0f}ms interpreted x expected gain {:.0f}% < "
          "estimated compile cost {:.0f}ms{}",
          state.range.start_pc, ran_ms, kCompiledGain * 100, cost_ms, spare_note);
  } else if (pays && state.deferred) {
    logAt(LogLevel::Info, "JIT",
          "Compiling the region at PC=0x{:02X} pays off now: {:.0f}ms interpreted x expected gain {:.0f}% >= "
          "estimated compile cost {:.0f}ms{}",
          state.range.start_pc, ran_ms, kCompiledGain * 100, cost_ms, spare_note);
  }
  state.deferred = !pays;
  return pays;
}

// Tuning is worth starting once the time spent since the untuned install, times the expected
// fraction saved, repays its estimated cost: the past predicts as much again to come.
bool Jit::tuningPaysOff(double ran_ms, double cost_ms, double gain) const {
  return !payoffWaits() || cost_ms <= 0 || ran_ms * gain >= cost_ms;
}

// `codegen_cpu_ms`: the region's codegen CPU (all threads), so each candidate's compile is priced at
// its CPU, not at a wall time that on a busy host is mostly waiting for a core.
TuneEstimate Jit::estimateTuning(const CompiledRegion& region, double codegen_cpu_ms) const {
  TuneEstimate total{0.0, 0.0};
  if (level_ < 2 || options_.tuner == nullptr) return total;
  const double compile_ms = codegen_cpu_ms / std::max(1, region.kernels());
  int tunable = 0;
  for (const Step& step : region.plan->steps) {
    if (!step.kernel || step.kind == Step::Kind::Opaque) continue;  // opaque steps are never tuned
    const TuneEstimate one = options_.tuner->estimate(*engine_, *step.kernel->family, step.kernel->spec, compile_ms);
    if (one.cost_ms <= 0) continue;
    total.cost_ms += one.cost_ms;
    total.gain += one.gain;
    ++tunable;
  }
  total.gain = tunable > 0 ? total.gain / tunable : 1.0;
  return total;
}

std::vector<Jit::RangeState> Jit::rangeStates(int function) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return ranges_[static_cast<std::size_t>(function)];
}

Jit::SiteState Jit::siteState(int function, int site) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return sites_[static_cast<std::size_t>(function)][static_cast<std::size_t>(site)];
}

JitStats Jit::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  JitStats out = stats_;
  out.compiles_pending = queue_.size() + static_cast<std::size_t>(in_flight_);
  for (std::size_t f = 0; f < sites_.size(); ++f) {
    FunctionRuntime& runtime = vm_.runtime(static_cast<int>(f));
    for (std::size_t s = 0; s < sites_[f].size(); ++s) {
      const DispatchSlot& slot = runtime.slots[s];
      const std::uint64_t calls = slot.calls.load(std::memory_order_relaxed);
      const std::uint64_t compiled = slot.compiled_calls.load(std::memory_order_relaxed);
      out.compiled_calls += compiled;
      out.interpreted_calls += calls - compiled;
      if (sites_[f][s].phase == SiteState::Phase::Compiled && !sites_[f][s].tuned) ++out.tuning_deferred;
      switch (sites_[f][s].phase) {
        case SiteState::Phase::NoKernel: out.fallbacks[static_cast<std::size_t>(JitReason::NoKernel)] += calls; break;
        case SiteState::Phase::Unsupported: out.fallbacks[static_cast<std::size_t>(JitReason::Unsupported)] += calls; break;
        case SiteState::Phase::Blacklisted: out.fallbacks[static_cast<std::size_t>(JitReason::Blacklisted)] += calls; break;
        default: break;
      }
    }
  }
  for (const std::vector<RangeState>& ranges : ranges_) {
    for (const RangeState& range : ranges) {
      out.region_declines += range.declines->load(std::memory_order_relaxed);
      out.region_runs += range.runs->load(std::memory_order_relaxed);
      out.region_row_blocked += range.row_blocked->load(std::memory_order_relaxed);
      out.region_opaque_fallbacks += range.opaque_fallbacks->load(std::memory_order_relaxed);
      const bool tunable = level_ >= 2 && options_.tuner != nullptr && range.tune_cost_ms > 0;
      if (tunable && range.phase == RangeState::Phase::Installed && !range.tuned) ++out.tuning_deferred;
      if (range.phase == RangeState::Phase::Cold && range.deferred) ++out.compiles_deferred;
    }
  }
  if (engine_) {
    out.codegen_count = engine_->codegens();
    out.kernels_from_cache = engine_->kernelsFromCache();
  }
  return out;
}

std::string Jit::statsReport() const {
  const JitStats s = stats();
  std::string text = fmt::format(
      "jit: level O{}, {} compile requests ({} dropped), {} kernels installed, {} compile failures, {} validation "
      "failures, {} blacklisted sites\n",
      level_, s.requests, s.dropped_requests, s.compiles, s.compile_failures, s.validation_failures, s.blacklisted_sites);
  // Total, median and max of per-install figures.
  const auto spread = [](std::vector<double> values) {
    std::sort(values.begin(), values.end());
    double total = 0;
    for (double v : values) total += v;
    return std::array<double, 3>{total, values.empty() ? 0.0 : values[values.size() / 2],
                                 values.empty() ? 0.0 : values.back()};
  };
  const auto [total, median, max] = spread(s.compile_ms);
  text += fmt::format(
      "jit: compile time {:.1f} ms (shape inference {:.1f} ms, codegen {:.1f} ms, validation+patch {:.1f} ms); per "
      "kernel median {:.1f} ms, max {:.1f} ms\n",
      total, s.shape_infer_ms, s.codegen_ms, s.validate_patch_ms, median, max);
  const auto [cpu_total, cpu_median, cpu_max] = spread(s.compile_cpu_ms);
  text += fmt::format(
      "jit: compile CPU {:.1f} ms, all compile threads (shape inference {:.1f} ms, codegen {:.1f} ms, validation+patch "
      "{:.1f} ms, tuning {:.1f} ms); per kernel median {:.1f} ms, max {:.1f} ms\n",
      cpu_total, s.shape_infer_cpu_ms, s.codegen_cpu_ms, s.validate_patch_cpu_ms, s.tuning_cpu_ms, cpu_median, cpu_max);
  text += fmt::format("jit: {} fused regions ({} ops folded into fused kernels and matmul epilogues); {} region "
                      "executions served, {} declined (ran op by op), {} ran kernels in row blocks\n",
                      s.fused_regions, s.fused_ops, s.region_runs, s.region_declines, s.region_row_blocked);
  text += fmt::format(
      "jit: tuning {:.1f} ms: {} kernels tuned by timing, {} tuning-database hits; {} tunings deferred "
      "(would not pay off yet)\n",
      s.tuning_ms, s.tuned_kernels, s.tuning_cache_hits, s.tuning_deferred);
  if (s.early_compiles > 0) {
    text += fmt::format(
        "jit: {} fused regions compiled before hot_count: their interpreted time already repaid the "
        "estimated compile cost\n",
        s.early_compiles);
  }
  if (s.compiles_deferred > 0) {
    text += fmt::format(
        "jit: {} hot fused regions not compiled yet: their interpreted time does not repay the "
        "estimated compile cost (compile_payoff_ms)\n",
        s.compiles_deferred);
  }
  if (s.compiles_pending > 0) {
    text += fmt::format(
        "jit: {} compiles/tunings still queued or running in the background: the compile and tuning "
        "figures are not final\n",
        s.compiles_pending);
  }
  text += fmt::format(
      "jit: kernel cache: {} kernels from the cache, {} LLVM codegens; {} installed on first sight "
      "(install record)\n",
      s.kernels_from_cache, s.codegen_count, s.first_sight_installs);
  text += fmt::format("jit: kernel launches {} compiled (served by an existing kernel) vs {} interpreted; {} guard misses\n",
                      s.compiled_calls, s.interpreted_calls, s.guard_misses);
  std::string reasons;
  for (int r = 0; r < kNumJitReasons; ++r) {
    if (s.fallbacks[static_cast<std::size_t>(r)] == 0) continue;
    reasons += fmt::format("{}{} {}", reasons.empty() ? "" : ", ", jitReasonName(static_cast<JitReason>(r)),
                           s.fallbacks[static_cast<std::size_t>(r)]);
  }
  text += fmt::format("jit: fallbacks by reason: {}\n", reasons.empty() ? "none" : reasons);
  if (engine_) text += engine_->statsReport();
  return text;
}

}  // namespace shapevm::jit
