// SPDX-License-Identifier: Apache-2.0
// Jit::warmStart: the synchronous warm start. Before the first call, every op site and fused range
// the install records (install_record.h) list is compiled on the calling thread from profile
// records rebuilt from the recorded signatures, through the usual compileSite/compileRange: the
// kernel cache and the tuning database provide the code and parameters, validation is never
// skipped, the guards decide at run time. Invariant: a record, a layout or a cached kernel that
// does not fit costs at most a compile or leaves the entry to the usual tier-up, never a wrong
// result; nothing to do is a report with a note, never an error.
#include <algorithm>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "jit/compile_cancel.h"
#include "jit/jit.h"
#include "jit/kernel_cache.h"
#include "jit/shape_infer.h"
#include "support/logging.h"
#include "support/trace.h"

namespace shapevm::jit {

using detail::addRecordedShapes;
using detail::recordFromSignature;

// ---- synchronous warm start (Jit::warmStart) ----
// Install records list signatures (ProfileRecord::toString): dtypes and shapes, not strides or
// non-tensor operands, so each install also keeps the full record of every member site's newest
// shape beside them: a companion record ("<identity>-layouts.svmi", the same file format, so
// `cache export/import` carry it and a damaged one is skipped), one layout line per site.
namespace {
using Clock = std::chrono::steady_clock;

// One record as one line: per operand "t <dtype> <dims> <strides>" or "s <kind> <scalar>", " ; "
// between operands, "-" for an empty list.
std::string encodeLayout(const ProfileRecord& record) {
  std::string text;
  const auto dims = [](const Shape& shape) {
    std::string out;
    for (int d = 0; d < shape.rank(); ++d) out += fmt::format("{}{}", d ? "," : "", shape[d]);
    return out.empty() ? std::string("-") : out;
  };
  for (std::size_t i = 0; i < record.inputs.size(); ++i) {
    const OperandProfile& operand = record.inputs[i];
    text += i ? " ; " : "";
    text += operand.is_tensor
                ? fmt::format("t {} {} {}", dtypeShortName(operand.dtype), dims(operand.shape), dims(operand.strides))
                : fmt::format("s {} {}", static_cast<int>(operand.kind), operand.scalar);
  }
  return text;
}

std::optional<Shape> decodeDims(std::string_view text) {
  Shape shape;
  if (text == "-") return shape;
  while (!text.empty()) {
    const std::size_t comma = std::min(text.find(','), text.size());
    std::int64_t d = 0;
    const auto [ptr, error] = std::from_chars(text.data(), text.data() + comma, d);
    if (error != std::errc() || ptr != text.data() + comma || shape.rank() >= kMaxRank) return std::nullopt;
    shape.push_back(d);
    text.remove_prefix(std::min(comma + 1, text.size()));
  }
  return shape;
}

std::optional<ProfileRecord> decodeLayout(std::string_view text) {
  ProfileRecord record;
  record.count = 1;
  while (!text.empty()) {
    const std::size_t end = std::min(text.find(" ; "), text.size());
    std::string_view operand_text = text.substr(0, end);
    text.remove_prefix(std::min(end + 3, text.size()));
    std::vector<std::string_view> words;
    while (!operand_text.empty()) {
      const std::size_t space = std::min(operand_text.find(' '), operand_text.size());
      words.push_back(operand_text.substr(0, space));
      operand_text.remove_prefix(std::min(space + 1, operand_text.size()));
    }
    OperandProfile operand;
    if (words.size() == 4 && words[0] == "t") {
      const std::optional<DType> dtype = parseDType(words[1]);
      std::optional<Shape> shape = decodeDims(words[2]), strides = decodeDims(words[3]);
      if (!dtype || !shape || !strides || strides->rank() != shape->rank()) return std::nullopt;
      operand.is_tensor = true;
      operand.dtype = *dtype;
      operand.shape = *shape;
      operand.strides = *strides;
    } else if (words.size() == 3 && words[0] == "s") {
      int kind = 0;
      const auto [ptr, error] = std::from_chars(words[1].data(), words[1].data() + words[1].size(), kind);
      if (error != std::errc() || ptr != words[1].data() + words[1].size() || kind < 0 ||
          kind > static_cast<int>(ValueKind::Tuple) || kind == static_cast<int>(ValueKind::Tensor)) {
        return std::nullopt;
      }
      operand.kind = static_cast<ValueKind>(kind);
      char* parsed = nullptr;
      const std::string scalar(words[2]);
      operand.scalar = std::strtod(scalar.c_str(), &parsed);
      if (parsed != scalar.c_str() + scalar.size()) return std::nullopt;
    } else {
      return std::nullopt;
    }
    record.inputs.push_back(std::move(operand));
  }
  if (record.inputs.empty()) return std::nullopt;
  return record;
}

// Without a kept layout (a record written before warm start existed): the signature's first
// entry as a record with contiguous strides, when every operand is a tensor.
std::optional<ProfileRecord> layoutFromSignature(std::string_view sig) {
  ProfileRecord like;
  std::string_view rest = sig;
  while (!rest.empty()) {
    const std::size_t end = std::min(rest.find(" x "), rest.size());
    const std::string_view text = rest.substr(0, end);
    rest.remove_prefix(std::min(end + 3, rest.size()));
    const std::size_t open = text.find('(');
    const std::optional<DType> dtype = open == std::string_view::npos ? std::nullopt : parseDType(text.substr(0, open));
    if (!dtype) return std::nullopt;  // "_": a non-tensor operand whose value the signature lacks
    OperandProfile operand;
    operand.is_tensor = true;
    operand.dtype = *dtype;
    const auto rank = static_cast<int>(std::count(text.begin(), text.end(), ',') + (text.size() > open + 2 ? 1 : 0));
    for (int d = 0; d < rank && d < kMaxRank; ++d) {
      operand.shape.push_back(-1);  // differs from every real shape: recordFromSignature gives contiguous strides
      operand.strides.push_back(1);
    }
    like.inputs.push_back(std::move(operand));
  }
  like.last_seen = 1;
  return recordFromSignature(like, sig);
}

// The profile records one recorded member (its signatures `sigs`) stands for, on `layout` (an
// earlier process's newest record at the site, rebuilt on a recorded signature when it is not one
// of them); its own signature is the newest. Every signature joins when `all` or every operand is a
// tensor (as on first sight: a rebuilt record keeps the layout's non-tensor operands, which need
// not fit the other shapes). nullopt when they cannot be rebuilt (no layout and a non-tensor operand).
std::optional<std::vector<ProfileRecord>> warmRecords(const ProfileRecord* layout, const std::set<std::string>& sigs,
                                                      bool all) {
  if (sigs.empty()) return std::nullopt;
  std::optional<ProfileRecord> like;
  if (layout != nullptr) {
    like = sigs.count(layout->toString()) != 0 ? std::optional<ProfileRecord>(*layout)
                                               : recordFromSignature(*layout, *sigs.begin());
  } else {
    like = layoutFromSignature(*sigs.begin());
  }
  if (!like) return std::nullopt;
  like->count = 1;
  like->last_seen = sigs.size() + 1;
  std::vector<ProfileRecord> out{*like};
  const bool tensors_only =
      std::all_of(like->inputs.begin(), like->inputs.end(), [](const OperandProfile& o) { return o.is_tensor; });
  if (tensors_only) {
    addRecordedShapes(out, sigs);
  } else if (all) {
    for (const std::string& sig : sigs) {
      if (sig == out.front().toString()) continue;
      if (std::optional<ProfileRecord> seen = recordFromSignature(out.front(), sig)) out.push_back(std::move(*seen));
    }
  }
  return out;
}
}  // namespace

void Jit::recordLayouts(int function, std::span<const int> sites) {
  KernelCache* cache = engine_->kernelCache();
  const FunctionRecord& entry = install_records_[static_cast<std::size_t>(function)];
  InstallRecord mine;
  mine.identity = InstallRecord::layoutsIdentity(entry.record.identity);
  const std::string file = InstallRecord::fileName(mine.identity);
  std::lock_guard<std::mutex> write_lock(record_write_mutex_);
  const std::optional<std::string> text = cache->readInstallRecord(file);
  if (text) {
    Expected<InstallRecord> theirs = InstallRecord::decode(*text);
    if (theirs && theirs->identity == mine.identity) mine = std::move(*theirs);
  }
  bool added = false;
  for (int site : sites) {
    if (mine.sites.count(site) != 0) continue;  // one layout per site: the first process's
    const std::vector<ProfileRecord> records =
        vm_.runtime(function).profiles[static_cast<std::size_t>(site)].snapshot();
    const ProfileRecord* newest = newestRecord(records);
    if (newest == nullptr) continue;  // a warm-started install: nothing profiled yet
    InstallRecord::Entry layout;
    layout.first_site = site;
    layout.sigs = {{encodeLayout(*newest)}};
    mine.sites.emplace(site, std::move(layout));
    added = true;
  }
  if (added) (void)cache->writeInstallRecord(file, mine.encode());
}

std::map<int, ProfileRecord> Jit::loadLayouts(int function) {
  std::map<int, ProfileRecord> layouts;
  KernelCache* cache = engine_->kernelCache();
  const std::string identity =
      InstallRecord::layoutsIdentity(install_records_[static_cast<std::size_t>(function)].record.identity);
  const std::optional<std::string> text = cache->readInstallRecord(InstallRecord::fileName(identity));
  if (!text) return layouts;
  Expected<InstallRecord> decoded = InstallRecord::decode(*text);
  if (decoded && decoded->identity != identity) decoded = makeError(ErrorCode::InvalidArgument, "another identity");
  if (!decoded) {
    logAt(LogLevel::Warn, "JIT", "kernel cache: ignoring operand layouts {}/{}: {}", cache->directory(),
          InstallRecord::fileName(identity), decoded.status().message());
    return layouts;
  }
  for (const auto& [site, layout] : decoded->sites) {
    for (const std::string& line : layout.sigs.empty() ? std::set<std::string>{} : layout.sigs.front()) {
      if (std::optional<ProfileRecord> record = decodeLayout(line)) {
        layouts.emplace(site, std::move(*record));
        break;
      }
    }
  }
  return layouts;
}

namespace {
const ProfileRecord* layoutAt(const std::map<int, ProfileRecord>& layouts, int site) {
  auto it = layouts.find(site);
  return it == layouts.end() ? nullptr : &it->second;
}

constexpr const char* kWarmStopped = "the warm start's timeout passed or it was cancelled";

// After a warm compile that installed nothing: true (and `item` Failed, with why) when it failed to
// compile or validate, judged by the JIT's failure counts before it.
bool warmFailed(WarmStartItem& item, const JitStats& now, std::uint64_t validation_failures,
                std::uint64_t compile_failures) {
  if (now.validation_failures == validation_failures && now.compile_failures == compile_failures) return false;
  item.outcome = WarmStartItem::Outcome::Failed;
  item.reason = now.validation_failures > validation_failures
                    ? "validation failed (the cached code was rejected; the log says why)"
                    : "the compile failed (the log says why)";
  return true;
}
}  // namespace

void Jit::warmRange(int function, int range, const std::map<int, ProfileRecord>& layouts, WarmStartItem& item) {
  using Outcome = WarmStartItem::Outcome;
  const auto f = static_cast<std::size_t>(function);
  InstallRecord::Entry recorded;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    recorded = install_records_[f].record.ranges.at(range);
  }
  item.region = true;
  if (static_cast<std::size_t>(range) >= ranges_[f].size()) {
    item.outcome = Outcome::Declined;
    item.reason = "the record lists a fused range this program does not have";
    return;
  }
  const FusionRange& fusion = ranges_[f][static_cast<std::size_t>(range)].range;
  item.pc = fusion.start_pc;
  if (fusion.sites.empty() || fusion.sites[0] != recorded.first_site || recorded.sigs.size() != fusion.sites.size()) {
    item.outcome = Outcome::Declined;
    item.reason = "the recorded range does not match this program's";
    return;
  }
  // Every recorded shape first (a region planned for all of them); where a member's non-tensor
  // operands do not fit them (not planned: the range stays Cold), the layouts' own shapes alone.
  for (const bool all : {true, false}) {
    std::vector<std::vector<ProfileRecord>> records;
    bool widened = false;
    for (std::size_t k = 0; k < fusion.sites.size(); ++k) {
      std::optional<std::vector<ProfileRecord>> member =
          warmRecords(layoutAt(layouts, fusion.sites[k]), recorded.sigs[k], all);
      if (!member) {
        item.outcome = Outcome::Declined;
        item.reason = fmt::format(
            "no operand layout kept for its op at site {} (a record from before warm start); "
            "first sight installs it after the first call",
            fusion.sites[k]);
        return;
      }
      widened = widened || (all && member->size() > 1 && !member->front().inputs.empty() &&
                            !std::all_of(member->front().inputs.begin(), member->front().inputs.end(),
                                         [](const OperandProfile& o) { return o.is_tensor; }));
      records.push_back(std::move(*member));
    }
    std::uint64_t validation_failures = 0, compile_failures = 0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      RangeState& state = ranges_[f][static_cast<std::size_t>(range)];
      if (state.phase != RangeState::Phase::Cold || state.compiles > 0) {
        item.reason = "already installed or queued";
        return;
      }
      state.phase = RangeState::Phase::Queued;
      state.declines_at_request = state.declines->load(std::memory_order_relaxed);
      validation_failures = stats_.validation_failures;
      compile_failures = stats_.compile_failures;
    }
    Request request{function, fusion.sites[0], range, false, true, recorded.tuned};
    request.warm_records = &records;
    const std::uint64_t codegens = engine_->codegens();
    compileRange(request);
    item.codegens += engine_->codegens() - codegens;
    std::lock_guard<std::mutex> lock(mutex_);
    RangeState& state = ranges_[f][static_cast<std::size_t>(range)];
    if (state.phase == RangeState::Phase::Installed) {
      item.outcome = Outcome::Installed;
      item.reason = state.description;
    } else if (compileCancelled()) {
      state.phase = RangeState::Phase::Cold;  // first sight takes it after the first call
      item.reason = kWarmStopped;
    } else if (!warmFailed(item, stats_, validation_failures, compile_failures)) {
      item.outcome = Outcome::Declined;
      item.reason = "not planned as recorded (the log says why); it takes the usual tier-up";
      if (widened && state.phase == RangeState::Phase::Cold) continue;  // try the layouts' shapes alone
    }
    return;
  }
}

void Jit::warmSite(int function, int site, const std::map<int, ProfileRecord>& layouts, WarmStartItem& item) {
  using Outcome = WarmStartItem::Outcome;
  const auto f = static_cast<std::size_t>(function);
  InstallRecord::Entry recorded;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    recorded = install_records_[f].record.sites.at(site);
  }
  if (static_cast<std::size_t>(site) >= sites_[f].size()) {
    item.outcome = Outcome::Declined;
    item.reason = "the record lists an op site this program does not have";
    return;
  }
  std::optional<std::vector<ProfileRecord>> records =
      recorded.sigs.size() == 1 ? warmRecords(layoutAt(layouts, site), recorded.sigs[0], false) : std::nullopt;
  std::vector<std::vector<ProfileRecord>> member;
  std::uint64_t validation_failures = 0, compile_failures = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    SiteState& state = sites_[f][static_cast<std::size_t>(site)];
    item.pc = state.pc;
    if (state.phase != SiteState::Phase::Cold || state.compiles > 0 || coveredByRange(function, site)) {
      item.reason = "already installed, queued or covered by an installed fused range";
      return;
    }
    if (!records) {
      item.outcome = Outcome::Declined;
      item.reason =
          "no operand layout kept for it (a record from before warm start); first sight installs it "
          "after the first call";
      return;
    }
    member.push_back(std::move(*records));
    state.phase = SiteState::Phase::Queued;
    validation_failures = stats_.validation_failures;
    compile_failures = stats_.compile_failures;
  }
  Request request{function, site, -1, false, true, false};
  request.warm_records = &member;
  const std::uint64_t codegens = engine_->codegens();
  compileSite(request);
  item.codegens = engine_->codegens() - codegens;
  std::lock_guard<std::mutex> lock(mutex_);
  SiteState& state = sites_[f][static_cast<std::size_t>(site)];
  if (state.phase == SiteState::Phase::Compiled) {
    item.outcome = Outcome::Installed;
    item.reason = fmt::format("kernel for {}", member[0].front().toString());
  } else if (compileCancelled()) {
    if (state.phase == SiteState::Phase::Queued) state.phase = SiteState::Phase::Cold;
    item.reason = kWarmStopped;
  } else if (!warmFailed(item, stats_, validation_failures, compile_failures)) {
    item.outcome = Outcome::Declined;
    item.reason = "no kernel for it at these shapes (the log says why)";
  }
}

WarmStartReport Jit::warmStart(std::chrono::milliseconds timeout, const std::atomic<bool>* cancel) {
  WarmStartReport report;
  const Clock::time_point start = Clock::now();
  KernelCache* cache = engine_ ? engine_->kernelCache() : nullptr;
  bool any = false;
  for (const FunctionRecord& entry : install_records_) any = any || !entry.record.empty();
  if (level_ < 1) {
    report.note = "jit_level is O0: nothing is compiled";
  } else if (cache == nullptr || cache->directory().empty()) {
    report.note = "the kernel cache is off: nothing to install";
  } else if (!any) {
    report.note =
        fmt::format("no install record for this program in {} (a cold cache): the first calls tier up as usual",
                    cache->directory());
  }
  if (!report.note.empty()) {
    logAt(LogLevel::Info, "JIT", "Warm start: {}", report.note);
    return report;
  }
  // A watchdog turns the timeout and the caller's flag into the compile cancel flag, which the
  // compiles poll (before each LLVM compile, between tuning candidates).
  std::atomic<bool> stop{false};
  std::mutex watch_mutex;
  std::condition_variable watch_cv;
  bool done = false;
  const Clock::time_point deadline = timeout.count() > 0 ? start + timeout : Clock::time_point::max();
  std::thread watchdog([&] {
    std::unique_lock<std::mutex> lock(watch_mutex);
    while (!done) {
      if (Clock::now() >= deadline) report.timed_out = true;
      if ((cancel != nullptr && cancel->load(std::memory_order_relaxed)) || cancel_.load(std::memory_order_relaxed)) {
        report.cancelled = true;
      }
      if (report.timed_out || report.cancelled) {
        stop.store(true, std::memory_order_relaxed);
        return;
      }
      const Clock::time_point poll = Clock::now() + std::chrono::milliseconds(2);
      watch_cv.wait_until(lock, std::min(poll, deadline));
    }
  });
  std::size_t events_before = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++in_flight_;  // waitIdle and the settle check see the compiles on this thread
    events_before = stats_.events.size();
  }
  {
    const CompileCancelScope cancellable(&stop);
    trace::Scope span("compile", "warm start");
    for (std::size_t f = 0; f < install_records_.size(); ++f) {
      const int function = static_cast<int>(f);
      // Installs add to the record (recordInstall): walk a copy of its indices.
      std::vector<int> ranges, sites;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        for (const auto& [range, unused] : install_records_[f].record.ranges) ranges.push_back(range);
        for (const auto& [site, unused] : install_records_[f].record.sites) sites.push_back(site);
      }
      if (ranges.empty() && sites.empty()) continue;
      const std::map<int, ProfileRecord> layouts = loadLayouts(function);
      // Ranges first: a site an installed range covers needs no kernel of its own.
      for (int range : ranges) {
        WarmStartItem& item = report.items.emplace_back();
        item.function = function;
        item.region = true;
        if (stop.load(std::memory_order_relaxed)) {
          item.reason = kWarmStopped;
          continue;
        }
        warmRange(function, range, layouts, item);
      }
      for (int site : sites) {
        WarmStartItem& item = report.items.emplace_back();
        item.function = function;
        if (stop.load(std::memory_order_relaxed)) {
          item.reason = kWarmStopped;
          continue;
        }
        warmSite(function, site, layouts, item);
      }
    }
  }
  {
    std::lock_guard<std::mutex> lock(watch_mutex);
    done = true;
  }
  watch_cv.notify_all();
  watchdog.join();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    --in_flight_;
    for (std::size_t e = events_before; e < stats_.events.size(); ++e) report.cpu_ms += stats_.events[e].cpu_ms;
  }
  idle_cv_.notify_all();
  report.wall_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  int installed = 0;
  for (const WarmStartItem& item : report.items) installed += item.outcome == WarmStartItem::Outcome::Installed ? 1 : 0;
  logAt(LogLevel::Info, "JIT", "Warm start: {} of {} recorded sites and ranges installed in {:.1f}ms{}", installed,
        report.items.size(), report.wall_ms,
        report.timed_out   ? " (timed out)"
        : report.cancelled ? " (cancelled)"
                           : "");
  return report;
}

}  // namespace shapevm::jit
