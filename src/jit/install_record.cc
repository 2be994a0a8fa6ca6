// SPDX-License-Identifier: Apache-2.0
// Install records (install_record.h): a line-based text file whose last line is a checksum of the
// lines above it, so a truncated or edited file is recognised and ignored.
#include "jit/install_record.h"

#include <sys/mman.h>

#include <charconv>
#include <cstring>
#include <set>

#include <fmt/format.h>

#include "jit/kernel_cache.h"
#include "jit/region_executor.h"
#include "jit/region_plan.h"
#include "support/logging.h"
#include "support/tunables.h"

namespace shapevm::jit {

namespace {

constexpr std::string_view kHeader = "shapevm install record 1";

std::uint64_t fnv1a(std::string_view text, std::uint64_t hash = 0xCBF29CE484222325ULL) {
  for (const char c : text) hash = (hash ^ static_cast<unsigned char>(c)) * 0x100000001B3ULL;
  return hash;
}

// Splits off the next space-separated field of `line` (the rest stays in `line`).
std::string_view field(std::string_view& line) {
  const std::size_t space = line.find(' ');
  const std::string_view out = line.substr(0, space);
  line = space == std::string_view::npos ? std::string_view() : line.substr(space + 1);
  return out;
}

bool number(std::string_view text, int& out) {
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), out);
  return error == std::errc() && end == text.data() + text.size() && out >= 0;
}

void appendEntry(std::string& out, std::string_view kind, int index, const InstallRecord::Entry& entry) {
  for (std::size_t m = 0; m < entry.sigs.size(); ++m) {
    for (const std::string& sig : entry.sigs[m]) {
      out += fmt::format("{} {} {} {} {} {} {}\n", kind, index, entry.first_site, entry.sigs.size(),
                         entry.tuned ? 1 : 0, m, sig);
    }
  }
}

void mergeEntries(std::map<int, InstallRecord::Entry>& into, const std::map<int, InstallRecord::Entry>& from) {
  for (const auto& [index, entry] : from) {
    auto [it, added] = into.try_emplace(index, entry);
    if (added) continue;
    InstallRecord::Entry& mine = it->second;
    if (mine.first_site != entry.first_site || mine.sigs.size() != entry.sigs.size()) continue;  // not the same range
    mine.tuned = mine.tuned || entry.tuned;
    for (std::size_t m = 0; m < entry.sigs.size(); ++m) mine.sigs[m].insert(entry.sigs[m].begin(), entry.sigs[m].end());
  }
}

}  // namespace

void InstallRecord::merge(const InstallRecord& other) {
  mergeEntries(sites, other.sites);
  mergeEntries(ranges, other.ranges);
}

std::string InstallRecord::encode() const {
  std::string out = fmt::format("{}\nidentity {}\n", kHeader, identity);
  for (const auto& [index, entry] : sites) appendEntry(out, "site", index, entry);
  for (const auto& [index, entry] : ranges) appendEntry(out, "range", index, entry);
  out += fmt::format("checksum {:016x}\n", fnv1a(out));
  return out;
}

Expected<InstallRecord> InstallRecord::decode(std::string_view text) {
  const std::size_t tail = text.rfind("checksum ");
  if (tail == std::string_view::npos || (tail > 0 && text[tail - 1] != '\n')) {
    return makeError(ErrorCode::InvalidArgument, "no checksum line (truncated?)");
  }
  if (fmt::format("checksum {:016x}\n", fnv1a(text.substr(0, tail))) != text.substr(tail)) {
    return makeError(ErrorCode::InvalidArgument, "the checksum does not match (damaged or truncated)");
  }
  InstallRecord record;
  std::string_view body = text.substr(0, tail);
  int line_number = 0;
  while (!body.empty()) {
    const std::size_t end = body.find('\n');
    std::string_view line = body.substr(0, end);
    body = end == std::string_view::npos ? std::string_view() : body.substr(end + 1);
    ++line_number;
    if (line_number == 1) {
      if (line != kHeader) return makeError(ErrorCode::InvalidArgument, "not an install record of this format");
      continue;
    }
    const std::string_view kind = field(line);
    if (kind == "identity") {
      record.identity = std::string(line);
      continue;
    }
    int index = 0, first = 0, members = 0, tuned = 0, member = 0;
    const bool ok = (kind == "site" || kind == "range") && number(field(line), index) && number(field(line), first) &&
                    number(field(line), members) && number(field(line), tuned) && number(field(line), member) &&
                    members > 0 && members <= 4096 && member < members && tuned <= 1 && !line.empty();
    if (!ok) return makeError(ErrorCode::InvalidArgument, "line {} is malformed", line_number);
    std::map<int, Entry>& entries = kind == "site" ? record.sites : record.ranges;
    Entry& entry = entries[index];
    if (entry.sigs.empty()) {
      entry.first_site = first;
      entry.sigs.resize(static_cast<std::size_t>(members));
    } else if (entry.first_site != first || entry.sigs.size() != static_cast<std::size_t>(members)) {
      return makeError(ErrorCode::InvalidArgument, "line {} contradicts an earlier line", line_number);
    }
    entry.tuned = entry.tuned || tuned == 1;
    entry.sigs[static_cast<std::size_t>(member)].insert(std::string(line));
  }
  if (record.identity.empty()) return makeError(ErrorCode::InvalidArgument, "no identity line");
  return record;
}

std::string installRecordIdentity(std::string_view function_text, int level, const std::string& code_identity) {
  std::uint64_t hash = fnv1a(function_text);
  hash = fnv1a(fmt::format("\nlevel {}\n", level), hash);
  hash = fnv1a(code_identity, hash);
  hash = fnv1a(shapevmBuildIdentity(), hash);
  return fmt::format("{:016x}", hash);
}

bool installRecordIntact(std::string_view text) {
  return InstallRecord::decode(text).hasValue();
}

// ---- ReferenceRunStore ----
// The file: the magic, the key, the op count, per op its output count and per output a kind
// (0 run again, 1 layout, 2 layout and contents), for kinds 1 and 2 dtype, rank and extents, for
// kind 2 the byte count, zero padding to a multiple of 64 bytes in the file, and the bytes; last a
// checksum of everything before it. Host byte order.

namespace {

constexpr std::string_view kReferenceMagic = "SVMREF02";
enum class Kept : std::uint8_t { Run = 0, Layout = 1, Contents = 2 };

// Kept contents start at a multiple of 64 bytes in the file (zero padding before them): the
// reader maps the file and uses them in place, aligned as the tensor allocator's memory is.
constexpr std::size_t kContentsAlignment = 64;
std::size_t alignedOffset(std::size_t at) {
  return (at + kContentsAlignment - 1) / kContentsAlignment * kContentsAlignment;
}

// A 64-bit hash of `bytes`, 32 at a time in four independent lanes (megabytes of inputs and
// outputs per region: not one long chain of multiplies).
std::uint64_t hashWords(const void* bytes, std::size_t n, std::uint64_t hash) {
  const auto* p = static_cast<const unsigned char*>(bytes);
  constexpr std::uint64_t kMul = 0x9E3779B97F4A7C15ULL;
  std::uint64_t lane[4] = {hash, hash ^ 0x1111111111111111ULL, hash ^ 0x2222222222222222ULL, hash ^ kMul};
  std::size_t k = 0;
  for (; k + 32 <= n; k += 32) {
    for (int l = 0; l < 4; ++l) {
      std::uint64_t word = 0;
      std::memcpy(&word, p + k + 8 * static_cast<std::size_t>(l), 8);
      lane[l] = (lane[l] ^ word) * kMul;
      lane[l] ^= lane[l] >> 29;
    }
  }
  hash = n;
  for (const std::uint64_t value : lane) hash = ((hash ^ value) * kMul) ^ (hash >> 31);
  for (; k < n; ++k) hash = (hash ^ p[k]) * 0x100000001B3ULL;
  return hash;
}

template <typename T>
void put(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof(T));
}

// Reads a T at `at` (advanced); false past the end.
template <typename T>
bool take(std::string_view data, std::size_t& at, T& value) {
  if (data.size() - at < sizeof(T)) return false;
  std::memcpy(&value, data.data() + at, sizeof(T));
  at += sizeof(T);
  return true;
}

bool sharesWithInput(const Tensor& t, const ROp& op, const RegionExecutor& reference) {
  for (int in : op.in) {
    if (in < 0) continue;
    const Value& input = reference.realValue(in);
    if (input.isTensor() && input.tensor().sharesStorageWith(t)) return true;
  }
  return false;
}

}  // namespace

std::uint64_t ReferenceRunStore::inputsKey(const RegionPlan& plan, std::span<const Value> inputs) {
  std::uint64_t hash = fnv1a(fmt::format("ops {} inputs {}", plan.ops.size(), inputs.size()));
  for (const Value& input : inputs) {
    if (!input.isTensor()) {
      hash = fnv1a(input.describe(), hash);
      continue;
    }
    const Tensor& t = input.tensor();
    hash = fnv1a(fmt::format("{} {} {}", t.describe(), t.strides().toString(), t.offset()), hash);
    hash = hashWords(t.storage()->data(), t.storage()->nbytes(), hash);
  }
  return hash;
}

std::optional<std::vector<std::vector<Value>>> ReferenceRunStore::load(std::uint64_t key,
                                                                       const RegionPlan& plan) const {
  // Mapped, not read: the kept contents become tensors over the file's pages (no copy, no fresh
  // memory to fault in), and the layout-only outputs tensors over an untouched anonymous mapping
  // (their bytes are never read), so this process's warm allocator blocks stay for validation.
  const std::shared_ptr<const MappedFile> file = cache_.mapInstallRecord(file_);
  if (!file) return std::nullopt;
  const std::string_view data = file->bytes();
  auto damaged = [&](std::string_view why) -> std::optional<std::vector<std::vector<Value>>> {
    logAt(LogLevel::Warn, "JIT", "kernel cache: ignoring the kept reference run {}/{}: {}", cache_.directory(), file_,
          why);
    return std::nullopt;
  };
  std::uint64_t sum = 0;
  if (data.size() < kReferenceMagic.size() + 8 || data.substr(0, kReferenceMagic.size()) != kReferenceMagic) {
    return damaged("not a kept reference run of this format");
  }
  std::memcpy(&sum, data.data() + data.size() - 8, 8);
  if (checksum(data.substr(0, data.size() - 8)) != sum) return damaged("the checksum does not match");
  const std::string_view body = data.substr(0, data.size() - 8);
  std::size_t at = kReferenceMagic.size();
  std::uint64_t kept_key = 0;
  std::uint32_t ops = 0;
  if (!take(body, at, kept_key) || !take(body, at, ops)) return damaged("truncated");
  if (kept_key != key || ops != plan.ops.size()) return std::nullopt;  // kept for other inputs
  // First the entries (checked), then the tensors over the file and the layout mapping.
  struct Entry {
    std::size_t op = 0;
    DType dtype = DType::Float32;
    Shape shape;
    std::size_t bytes = 0;
    std::size_t at = 0;  // the contents' offset in the file; 0: layout only
  };
  std::vector<Entry> entries;
  std::size_t layout_bytes = 0;
  const auto max_bytes = static_cast<std::uint64_t>(Tunables::get(Tunable::MaxTensorBytes));
  for (std::size_t o = 0; o < plan.ops.size(); ++o) {
    std::uint32_t count = 0;
    if (!take(body, at, count) || count != plan.ops[o].out.size()) return damaged("its ops do not match the plan");
    bool runs = false, kept = false;
    for (std::uint32_t k = 0; k < count; ++k) {
      std::uint8_t kind = 0, dtype = 0, rank = 0;
      if (!take(body, at, kind) || kind > static_cast<std::uint8_t>(Kept::Contents)) return damaged("bad entry");
      (kind == static_cast<std::uint8_t>(Kept::Run) ? runs : kept) = true;
      if (runs && kept) return damaged("an op both kept and run");
      if (kind == static_cast<std::uint8_t>(Kept::Run)) continue;
      if (!take(body, at, dtype) || !take(body, at, rank) || rank > kMaxRank || dtype >= kNumDTypes) {
        return damaged("bad layout");
      }
      Entry entry;
      entry.op = o;
      entry.dtype = static_cast<DType>(dtype);
      std::uint64_t bytes = dtypeSize(entry.dtype);
      for (std::uint8_t d = 0; d < rank; ++d) {
        std::int64_t extent = 0;
        if (!take(body, at, extent) || extent < 0) return damaged("bad layout");
        entry.shape.push_back(extent);
        if (extent != 0 && bytes > max_bytes / static_cast<std::uint64_t>(extent)) return damaged("bad layout");
        bytes *= static_cast<std::uint64_t>(extent);
      }
      if (bytes > max_bytes) return damaged("bad layout");
      entry.bytes = static_cast<std::size_t>(bytes);
      if (kind == static_cast<std::uint8_t>(Kept::Contents)) {
        std::uint64_t stored = 0;
        if (!take(body, at, stored) || stored != bytes) return damaged("bad contents");
        at = alignedOffset(at);
        if (at > body.size() || body.size() - at < entry.bytes) return damaged("bad contents");
        entry.at = at;
        at += entry.bytes;
      } else {
        layout_bytes += alignedOffset(entry.bytes);
      }
      entries.push_back(std::move(entry));
    }
  }
  if (at != body.size()) return damaged("trailing bytes");
  std::shared_ptr<void> layouts;
  if (layout_bytes > 0) {
    void* mapped =
        ::mmap(nullptr, layout_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (mapped == MAP_FAILED) return damaged("no memory for its layouts");
    layouts = std::shared_ptr<void>(mapped, [layout_bytes](void* p) { ::munmap(p, layout_bytes); });
  }
  // Each tensor holds its mapping (a shared_ptr copy released with the tensor's storage).
  const auto over = [](std::shared_ptr<const void> owner, char* bytes, const Entry& entry) {
    auto* hold = new std::shared_ptr<const void>(std::move(owner));
    return Tensor::wrap(
        bytes, entry.dtype, entry.shape, contiguousStrides(entry.shape), entry.bytes,
        [](void* context) { delete static_cast<std::shared_ptr<const void>*>(context); }, hold);
  };
  std::vector<std::vector<Value>> outputs(plan.ops.size());
  std::size_t layout_at = 0;
  for (const Entry& entry : entries) {
    Tensor t;
    if (entry.at != 0) {
      t = over(file, file->data() + entry.at, entry);
    } else {
      t = over(layouts, static_cast<char*>(layouts.get()) + layout_at, entry);
      layout_at += alignedOffset(entry.bytes);
    }
    outputs[entry.op].push_back(Value::fromTensor(std::move(t)));
  }
  return outputs;
}

void ReferenceRunStore::keep(std::uint64_t key, const RegionPlan& plan, const RegionExecutor& reference) const {
  for (const Step& step : plan.steps) {
    if (step.stat) return;
  }
  std::set<int> written;
  for (const auto& [reg, v] : plan.writeback) written.insert(v);
  std::string out(kReferenceMagic);
  put(out, key);
  put(out, static_cast<std::uint32_t>(plan.ops.size()));
  for (const ROp& op : plan.ops) {
    put(out, static_cast<std::uint32_t>(op.out.size()));
    bool runs = false, kept = false;
    for (int v : op.out) {
      const Value& value = reference.realValue(v);
      if (!value.isTensor()) return;
      const Tensor& t = value.tensor();
      const bool view = sharesWithInput(t, op, reference);
      if (view && written.count(v) != 0) return;  // its contents would be lost
      if (!view && !t.isContiguous()) return;
      if (view) {
        runs = true;
        put(out, static_cast<std::uint8_t>(Kept::Run));
        continue;
      }
      kept = true;
      const bool contents = written.count(v) != 0;
      put(out, static_cast<std::uint8_t>(contents ? Kept::Contents : Kept::Layout));
      put(out, static_cast<std::uint8_t>(t.dtype()));
      put(out, static_cast<std::uint8_t>(t.rank()));
      for (int d = 0; d < t.rank(); ++d) put(out, t.dim(d));
      if (contents) {
        const std::size_t bytes = static_cast<std::size_t>(t.numel()) * t.itemSize();
        put(out, static_cast<std::uint64_t>(bytes));
        out.resize(alignedOffset(out.size()), '\0');  // mapped by the reader: aligned as tensors are
        out.append(static_cast<const char*>(t.rawData()), bytes);
      }
    }
    if (runs && kept) return;  // an op is either run again or given whole
  }
  put(out, checksum(out));
  (void)cache_.writeInstallRecord(file_, out);
}

std::uint64_t ReferenceRunStore::checksum(std::string_view bytes) {
  return hashWords(bytes.data(), bytes.size(), 0);
}

}  // namespace shapevm::jit
