// SPDX-License-Identifier: Apache-2.0
// The compiled-kernel cache (see kernel_cache.h): entry files, the in-process map, LRU eviction by
// file modification time (a hit touches its file), export/import, and the spec's key text.
#include "jit/kernel_cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <link.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <ctime>
#include <map>
#include <vector>

#include <fmt/format.h>

#include "jit/bf16_variant.h"
#include "jit/fusion.h"
#include "jit/install_record.h"
#include "support/logging.h"
#include "support/tunables.h"

#ifndef SHAPEVM_VERSION_STRING
#define SHAPEVM_VERSION_STRING "unknown"
#endif

namespace shapevm::jit {

namespace {

constexpr char kMagic[8] = {'S', 'V', 'M', 'K', 'E', 'R', 'N', '1'};
constexpr std::uint32_t kFormatVersion = 1;
constexpr std::size_t kHeaderBytes = 32;  // magic, version, key/symbol lengths, payload length, checksum
constexpr const char* kSuffix = ".svmk";
// The in-process map's bound (identical kernels within one process are the common case).
constexpr std::uint64_t kMemoryCapBytes = std::uint64_t{64} << 20;
// A temporary file this old belongs to a writer that died; eviction removes it.
constexpr std::time_t kStaleTempSeconds = 600;

// 64-bit hash, eight bytes at a time (checksums of objects, the build's code).
std::uint64_t hashBytes(const void* data, std::size_t size, std::uint64_t hash = 0x243F6A8885A308D3ULL) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  std::size_t i = 0;
  for (; i + 8 <= size; i += 8) {
    std::uint64_t word;
    std::memcpy(&word, bytes + i, 8);
    hash = (hash ^ word) * 0x9E3779B97F4A7C15ULL;
    hash ^= hash >> 29;
  }
  for (; i < size; ++i) {
    hash = (hash ^ bytes[i]) * 0x100000001B3ULL;
  }
  hash ^= size;
  hash *= 0xBF58476D1CE4E5B9ULL;
  return hash ^ (hash >> 31);
}

std::uint64_t capBytes() {
  return static_cast<std::uint64_t>(std::max<std::int64_t>(0, Tunables::get(Tunable::CacheMaxMb))) << 20;
}

void put32(std::string& out, std::uint32_t v) {
  out.append(reinterpret_cast<const char*>(&v), 4);
}
void put64(std::string& out, std::uint64_t v) {
  out.append(reinterpret_cast<const char*>(&v), 8);
}
template <typename T>
T get(std::string_view in, std::size_t at) {
  T v;
  std::memcpy(&v, in.data() + at, sizeof(T));
  return v;
}

bool endsWith(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

Status systemError(std::string_view what, const std::string& path) {
  return makeError(ErrorCode::IoError, "{} '{}': {}", what, path, std::strerror(errno));
}

Expected<std::string> readWhole(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return systemError("cannot open", path);
  std::string data;
  char buffer[1 << 16];
  for (;;) {
    const ssize_t got = ::read(fd, buffer, sizeof(buffer));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      Status error = systemError("cannot read", path);
      ::close(fd);
      return error;
    }
    if (got == 0) break;
    data.append(buffer, static_cast<std::size_t>(got));
  }
  ::close(fd);
  return data;
}

// Writes `data` to `path` whole: a temporary file in the same folder, then rename().
Status writeAtomically(const std::string& path, std::string_view data) {
  static std::atomic<std::uint64_t> counter{0};
  const std::size_t slash = path.rfind('/');
  const std::string temp = fmt::format("{}.{}.tmp.{}.{}", path.substr(0, slash + 1), path.substr(slash + 1), ::getpid(),
                                       counter.fetch_add(1));
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return systemError("cannot create", temp);
  std::size_t done = 0;
  while (done < data.size()) {
    const ssize_t wrote = ::write(fd, data.data() + done, data.size() - done);
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote <= 0) {
      Status error = systemError("cannot write", temp);
      ::close(fd);
      ::unlink(temp.c_str());
      return error;
    }
    done += static_cast<std::size_t>(wrote);
  }
  if (::close(fd) != 0) {
    Status error = systemError("cannot write", temp);
    ::unlink(temp.c_str());
    return error;
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    Status error = systemError("cannot rename into", path);
    ::unlink(temp.c_str());
    return error;
  }
  return Status::ok();
}

Status makeDirectories(const std::string& dir) {
  for (std::size_t pos = 1; pos <= dir.size(); ++pos) {
    if (pos != dir.size() && dir[pos] != '/') continue;
    const std::string prefix = dir.substr(0, pos);
    if (::mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) return systemError("cannot create directory", prefix);
  }
  struct stat info {};
  if (::stat(dir.c_str(), &info) != 0 || !S_ISDIR(info.st_mode)) return systemError("not a directory:", dir);
  return Status::ok();
}

struct DirEntry {
  std::string name;
  std::uint64_t size = 0;
  std::time_t mtime = 0;
  long mtime_ns = 0;
};

// The regular files of `dir` whose names start with `prefix` (none when it cannot be read).
std::vector<DirEntry> listFiles(const std::string& dir, std::string_view prefix = {}) {
  std::vector<DirEntry> files;
  DIR* handle = ::opendir(dir.c_str());
  if (handle == nullptr) return files;
  while (const dirent* entry = ::readdir(handle)) {
    const std::string name = entry->d_name;
    if (name == "." || name == ".." || name.compare(0, prefix.size(), prefix) != 0) continue;
    struct stat info {};
    if (::stat((dir + "/" + name).c_str(), &info) != 0 || !S_ISREG(info.st_mode)) continue;
    files.push_back(
        DirEntry{name, static_cast<std::uint64_t>(info.st_size), info.st_mtim.tv_sec, info.st_mtim.tv_nsec});
  }
  ::closedir(handle);
  return files;
}

bool isEntryName(const std::string& name) {
  return endsWith(name, kSuffix) && name.find(".tmp.") == std::string::npos;
}

bool isInstallRecordName(const std::string& name) {
  return endsWith(name, kInstallRecordSuffix) && name.find(".tmp.") == std::string::npos;
}

}  // namespace

std::string KernelCache::fileName(const std::string& key) {
  const std::string shape_class = kernelShapeClass(key);
  return fmt::format("{:016x}-{:016x}{}", hashBytes(shape_class.data(), shape_class.size()),
                     hashBytes(key.data(), key.size()), kSuffix);
}

std::string KernelCache::encode(const CachedCode& code) {
  std::string payload = code.key + code.symbol + code.bytes;
  std::string out(kMagic, sizeof(kMagic));
  put32(out, kFormatVersion);
  put32(out, static_cast<std::uint32_t>(code.key.size()));
  put32(out, static_cast<std::uint32_t>(code.symbol.size()));
  put32(out, static_cast<std::uint32_t>(code.bytes.size()));
  put64(out, hashBytes(payload.data(), payload.size()));
  out += payload;
  return out;
}

Expected<CachedCode> KernelCache::decode(std::string_view file) {
  if (file.size() < kHeaderBytes || std::memcmp(file.data(), kMagic, sizeof(kMagic)) != 0) {
    return makeError(ErrorCode::ParseError, "not a kernel cache entry ({} bytes, no header)", file.size());
  }
  const auto version = get<std::uint32_t>(file, 8);
  if (version != kFormatVersion) {
    return makeError(ErrorCode::ParseError, "entry format {} (this ShapeVM reads {})", version, kFormatVersion);
  }
  const std::uint64_t key_size = get<std::uint32_t>(file, 12);
  const std::uint64_t symbol_size = get<std::uint32_t>(file, 16);
  const std::uint64_t bytes_size = get<std::uint32_t>(file, 20);
  const std::uint64_t expected = kHeaderBytes + key_size + symbol_size + bytes_size;
  if (file.size() != expected) {
    return makeError(ErrorCode::ParseError, "truncated or padded: {} bytes, the header says {}", file.size(), expected);
  }
  const std::string_view payload = file.substr(kHeaderBytes);
  if (hashBytes(payload.data(), payload.size()) != get<std::uint64_t>(file, 24)) {
    return makeError(ErrorCode::ParseError, "checksum mismatch");
  }
  CachedCode code;
  code.key = std::string(payload.substr(0, key_size));
  code.symbol = std::string(payload.substr(key_size, symbol_size));
  code.bytes = std::string(payload.substr(key_size + symbol_size));
  return code;
}

std::shared_ptr<KernelCache> KernelCache::forDirectory(const std::string& dir) {
  static std::mutex mutex;
  static std::map<std::string, std::weak_ptr<KernelCache>> caches;
  std::lock_guard<std::mutex> lock(mutex);
  std::weak_ptr<KernelCache>& slot = caches[dir];
  if (std::shared_ptr<KernelCache> cache = slot.lock()) return cache;
  auto cache = std::make_shared<KernelCache>(dir);
  slot = cache;
  return cache;
}

KernelCache::KernelCache(std::string dir) : kernels_dir_(dir.empty() ? std::string() : dir + "/kernels") {
  counters_.directory = kernels_dir_;
}

void KernelCache::warnOnce(const std::string& what) {
  // Callers hold mutex_.
  if (write_warned_) return;
  write_warned_ = true;
  logAt(LogLevel::Warn, "JIT", "kernel cache: {}; compiled kernels are not kept on disk in this process", what);
}

std::optional<CachedCode> KernelCache::find(const std::string& key) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = by_key_.find(key);
    if (it != by_key_.end()) {
      recent_.splice(recent_.begin(), recent_, it->second);
      ++counters_.memory_hits;
      return *it->second;
    }
  }
  if (!kernels_dir_.empty()) {
    std::optional<CachedCode> code = readFile(key, kernels_dir_ + "/" + fileName(key));
    std::lock_guard<std::mutex> lock(mutex_);
    if (code) {
      ++counters_.disk_hits;
      remember(*code);
      return code;
    }
  }
  std::lock_guard<std::mutex> lock(mutex_);
  ++counters_.misses;
  return std::nullopt;
}

std::optional<CachedCode> KernelCache::readFile(const std::string& key, const std::string& path, bool touch) {
  Expected<std::string> file = readWhole(path);
  if (!file) return std::nullopt;  // no entry (or unreadable: a miss)
  Expected<CachedCode> code = decode(*file);
  std::string why;
  if (!code) {
    why = code.status().message();
  } else if (key.empty() ? fileName(code->key) != path.substr(path.rfind('/') + 1) : code->key != key) {
    why = "it holds another kernel's key (another CPU, LLVM or ShapeVM build, or a renamed file)";
  }
  if (!why.empty()) {
    logAt(LogLevel::Warn, "JIT", "kernel cache: ignoring {}: {}; compiling again", path, why);
    ::unlink(path.c_str());  // a fresh entry replaces it
    std::lock_guard<std::mutex> lock(mutex_);
    ++counters_.rejected;
    return std::nullopt;
  }
  if (touch) ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0);  // used now (best effort: LRU order)
  return code.value();
}

namespace {
// How much specialization a set of dims gives up: a dynamic dim costs 1 plus the log2 of its
// range's width, an unbounded one the most.
double looseness(const KeyDims& dims) {
  double total = 0;
  for (const std::vector<DimSpec>& operand : dims) {
    for (const DimSpec& dim : operand) {
      if (dim.isStatic()) continue;
      total += dim.bounded()
                   ? 1.0 + std::log2((static_cast<double>(dim.hi) + 1.0) / (static_cast<double>(dim.lo) + 1.0))
                   : 100.0;
    }
  }
  return total;
}
}  // namespace

std::optional<CachedCode> KernelCache::findCovering(const std::string& key) {
  const std::string shape_class = kernelShapeClass(key);
  const std::optional<KeyDims> wanted = kernelKeyDims(key);
  if (!wanted) return std::nullopt;
  std::optional<CachedCode> best;
  double best_looseness = 0;
  bool from_disk = false;
  const auto consider = [&](const CachedCode& code, bool disk) {
    if (code.key == key || kernelShapeClass(code.key) != shape_class) return;
    const std::optional<KeyDims> dims = kernelKeyDims(code.key);
    if (!dims || !keyDimsCover(*dims, *wanted)) return;
    const double loose = looseness(*dims);
    if (!best || loose < best_looseness) {
      best = code;
      best_looseness = loose;
      from_disk = disk;
    }
  };
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const CachedCode& code : recent_) consider(code, false);
  }
  if (!kernels_dir_.empty()) {
    // The entries of this shape class share the first half of their file names.
    const std::string prefix = fileName(key).substr(0, 17);
    for (const DirEntry& file : listFiles(kernels_dir_, prefix)) {
      if (!isEntryName(file.name)) continue;
      if (std::optional<CachedCode> code = readFile("", kernels_dir_ + "/" + file.name, false)) consider(*code, true);
    }
    if (from_disk) ::utimensat(AT_FDCWD, (kernels_dir_ + "/" + fileName(best->key)).c_str(), nullptr, 0);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  if (best) {
    ++counters_.covering_hits;
    ++(from_disk ? counters_.disk_hits : counters_.memory_hits);
    remember(*best);
  }
  return best;
}

void KernelCache::remember(const CachedCode& code) {
  auto it = by_key_.find(code.key);
  if (it != by_key_.end()) {
    recent_.splice(recent_.begin(), recent_, it->second);
    return;
  }
  recent_.push_front(code);
  by_key_[code.key] = recent_.begin();
  memory_bytes_ += code.bytes.size() + code.key.size();
  while (memory_bytes_ > kMemoryCapBytes && recent_.size() > 1) {
    const CachedCode& oldest = recent_.back();
    memory_bytes_ -= oldest.bytes.size() + oldest.key.size();
    by_key_.erase(oldest.key);
    recent_.pop_back();
  }
}

void KernelCache::store(const CachedCode& code) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    remember(code);
  }
  const std::uint64_t cap = capBytes();
  if (kernels_dir_.empty() || cap == 0) return;
  const std::string data = encode(code);
  Status written = makeDirectories(kernels_dir_);
  if (written.isOk()) written = writeAtomically(kernels_dir_ + "/" + fileName(code.key), data);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!written.isOk()) {
      ++counters_.write_failures;
      warnOnce(written.message());
      return;
    }
    ++counters_.stores;
    disk_bytes_estimate_ += data.size();
    // Other processes write too: rescan now and then, and whenever this process's view is full.
    if (scanned_ && disk_bytes_estimate_ <= cap && counters_.stores % 32 != 0) return;
  }
  evictIfNeeded(cap);
}

void KernelCache::evictIfNeeded(std::uint64_t cap) {
  std::vector<DirEntry> files = listFiles(kernels_dir_);
  const std::time_t now = std::time(nullptr);
  std::uint64_t total = 0;
  std::vector<DirEntry> entries;
  for (DirEntry& file : files) {
    if (file.name.find(".tmp.") != std::string::npos) {
      if (now - file.mtime > kStaleTempSeconds) ::unlink((kernels_dir_ + "/" + file.name).c_str());
      continue;
    }
    if (!isEntryName(file.name)) continue;
    total += file.size;
    entries.push_back(std::move(file));
  }
  std::uint64_t evicted = 0;
  if (total > cap) {
    // Oldest use first; down to 90% of the cap so the next stores do not evict one by one.
    std::sort(entries.begin(), entries.end(), [](const DirEntry& a, const DirEntry& b) {
      return a.mtime != b.mtime ? a.mtime < b.mtime : a.mtime_ns < b.mtime_ns;
    });
    const std::uint64_t target = cap / 10 * 9;
    for (const DirEntry& entry : entries) {
      if (total <= target) break;
      if (::unlink((kernels_dir_ + "/" + entry.name).c_str()) == 0 || errno == ENOENT) {
        total -= entry.size;
        ++evicted;
      }
    }
  }
  std::lock_guard<std::mutex> lock(mutex_);
  scanned_ = true;
  disk_bytes_estimate_ = total;
  counters_.evictions += evicted;
}

void KernelCache::forget(const std::string& key, std::string_view why) {
  logAt(LogLevel::Warn, "JIT", "kernel cache: dropping the entry of {}: {}", fileName(key), why);
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = by_key_.find(key);
  if (it != by_key_.end()) {
    memory_bytes_ -= it->second->bytes.size() + it->second->key.size();
    recent_.erase(it->second);
    by_key_.erase(it);
  }
  ++counters_.rejected;
  if (!kernels_dir_.empty()) ::unlink((kernels_dir_ + "/" + fileName(key)).c_str());
}

KernelCacheStats KernelCache::stats() const {
  KernelCacheStats out;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    out = counters_;
  }
  out.cap_bytes = capBytes();
  if (!kernels_dir_.empty()) {
    for (const DirEntry& file : listFiles(kernels_dir_)) {
      if (isInstallRecordName(file.name)) {
        ++(InstallRecord::isLayoutsFileName(file.name) ? out.layout_records : out.install_records);
      }
      if (!isEntryName(file.name)) continue;
      ++out.entries;
      out.bytes += file.size;
    }
  }
  return out;
}

Status KernelCache::clear() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    recent_.clear();
    by_key_.clear();
    memory_bytes_ = 0;
    disk_bytes_estimate_ = 0;
  }
  if (kernels_dir_.empty()) return Status::ok();
  for (const DirEntry& file : listFiles(kernels_dir_)) {
    if (!endsWith(file.name, kSuffix) && !isInstallRecordName(file.name) && !endsWith(file.name, kReferenceRunSuffix) &&
        file.name.find(".tmp.") == std::string::npos) {
      continue;
    }
    const std::string path = kernels_dir_ + "/" + file.name;
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) return systemError("cannot remove", path);
  }
  return Status::ok();
}

namespace {
// Copies every entry of `from` that decodes and whose name matches its key into `to` (atomically
// per file); the others are skipped with a warning naming `verb`. An entry that can no longer be
// read is skipped silently when `missing_ok` (evicted meanwhile), else with the same warning.
Expected<int> copyCheckedEntries(const std::string& from, const std::string& to, std::string_view verb,
                                 bool missing_ok) {
  int copied = 0;
  for (const DirEntry& file : listFiles(from)) {
    if (!isEntryName(file.name)) continue;
    const std::string path = from + "/" + file.name;
    Expected<std::string> data = readWhole(path);
    if (!data && missing_ok) continue;
    Expected<CachedCode> code = data ? KernelCache::decode(*data) : Expected<CachedCode>(data.status());
    if (!code || KernelCache::fileName(code->key) != file.name) {
      logAt(LogLevel::Warn, "JIT", "kernel cache: not {} {}: {}", verb, path,
            code ? "its name does not match its key" : code.status().message());
      continue;
    }
    SVM_RETURN_IF_ERROR(writeAtomically(to + "/" + file.name, *data));
    ++copied;
  }
  return copied;
}

// Copies the intact install records of `from` into `to`, merged with a record `to` already has
// (intact) for the same function; damaged ones are skipped with a warning. How many were copied.
Expected<int> copyInstallRecords(const std::string& from, const std::string& to, std::string_view verb) {
  int copied = 0;
  for (const DirEntry& file : listFiles(from)) {
    if (!isInstallRecordName(file.name)) continue;
    const std::string path = from + "/" + file.name;
    Expected<std::string> data = readWhole(path);
    if (!data) continue;  // removed meanwhile
    Expected<InstallRecord> record = InstallRecord::decode(*data);
    if (!record || InstallRecord::fileName(record->identity) != file.name) {
      logAt(LogLevel::Warn, "JIT", "kernel cache: not {} install record {}: {}", verb, path,
            record ? "its name does not match its identity" : record.status().message());
      continue;
    }
    if (Expected<std::string> existing = readWhole(to + "/" + file.name)) {
      Expected<InstallRecord> theirs = InstallRecord::decode(*existing);
      if (theirs && theirs->identity == record->identity) record->merge(*theirs);
    }
    SVM_RETURN_IF_ERROR(writeAtomically(to + "/" + file.name, record->encode()));
    ++copied;
  }
  return copied;
}
}  // namespace

std::optional<std::string> KernelCache::readInstallRecord(const std::string& name) const {
  if (kernels_dir_.empty()) return std::nullopt;
  Expected<std::string> data = readWhole(kernels_dir_ + "/" + name);
  if (!data) return std::nullopt;
  return std::move(*data);
}

std::shared_ptr<const MappedFile> KernelCache::mapInstallRecord(const std::string& name) const {
  if (kernels_dir_.empty()) return nullptr;
  return MappedFile::open(kernels_dir_ + "/" + name);
}

std::shared_ptr<const MappedFile> MappedFile::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return nullptr;
  struct stat info {};
  void* data = MAP_FAILED;
  if (::fstat(fd, &info) == 0 && S_ISREG(info.st_mode) && info.st_size > 0) {
    data = ::mmap(nullptr, static_cast<std::size_t>(info.st_size), PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  }
  ::close(fd);
  if (data == MAP_FAILED) return nullptr;
  return std::shared_ptr<const MappedFile>(
      new MappedFile(static_cast<char*>(data), static_cast<std::size_t>(info.st_size)));
}

MappedFile::~MappedFile() {
  ::munmap(data_, size_);
}

bool KernelCache::writeInstallRecord(const std::string& name, std::string_view text) {
  if (kernels_dir_.empty() || capBytes() == 0) return false;
  Status written = makeDirectories(kernels_dir_);
  if (written.isOk()) written = writeAtomically(kernels_dir_ + "/" + name, text);
  if (!written.isOk()) {
    std::lock_guard<std::mutex> lock(mutex_);
    ++counters_.write_failures;
    warnOnce(fmt::format("cannot write install record {}: {}", name, written.message()));
    return false;
  }
  return true;
}

Expected<int> KernelCache::exportTo(const std::string& dir) const {
  if (kernels_dir_.empty()) return makeError(ErrorCode::InvalidArgument, "this kernel cache has no directory");
  SVM_RETURN_IF_ERROR(makeDirectories(dir));
  SVM_ASSIGN_OR_RETURN(const int copied, copyCheckedEntries(kernels_dir_, dir, "exporting", /*missing_ok=*/true));
  if (Expected<int> records = copyInstallRecords(kernels_dir_, dir, "exporting"); !records) return records.status();
  return copied;
}

Expected<int> KernelCache::importFrom(const std::string& dir) {
  if (kernels_dir_.empty()) return makeError(ErrorCode::InvalidArgument, "this kernel cache has no directory");
  struct stat info {};
  if (::stat(dir.c_str(), &info) != 0 || !S_ISDIR(info.st_mode)) {
    return makeError(ErrorCode::InvalidArgument, "'{}' is not a directory of exported kernels", dir);
  }
  SVM_RETURN_IF_ERROR(makeDirectories(kernels_dir_));
  SVM_ASSIGN_OR_RETURN(const int copied, copyCheckedEntries(dir, kernels_dir_, "importing", /*missing_ok=*/false));
  if (Expected<int> records = copyInstallRecords(dir, kernels_dir_, "importing"); !records) return records.status();
  evictIfNeeded(std::max<std::uint64_t>(capBytes(), 1));
  return copied;
}

// ---- the key ----

namespace {

void appendOperand(std::string& out, const OperandSpec& in) {
  if (!in.is_tensor) {
    out += fmt::format("scalar{};", static_cast<int>(in.scalar_kind));
    return;
  }
  out += fmt::format("{}r{}{};", dtypeShortName(in.dtype), in.rank, in.contiguous ? "" : "s");
}

// One operand's part of the dims line: "size:lo:hi:divisor," per dim, then ";" (a scalar: ";").
void appendDims(std::string& out, const OperandSpec& in) {
  for (int d = 0; in.is_tensor && d < in.rank; ++d) {
    const DimSpec& dim = in.dims[d];
    out += fmt::format("{}:{}:{}:{},", dim.size, dim.lo, dim.hi, dim.divisor);
  }
  out += ";";
}

constexpr std::string_view kDimsLine = "\ndims ";

// Where the dims line's text starts and ends in `key` (npos when it has none).
std::pair<std::size_t, std::size_t> dimsSpan(std::string_view key) {
  const std::size_t at = key.find(kDimsLine);
  if (at == std::string_view::npos) return {at, at};
  const std::size_t begin = at + kDimsLine.size();
  return {begin, std::min(key.find('\n', begin), key.size())};
}

void appendProgram(std::string& out, const FusedProgram& p) {
  out += fmt::format("fused {} r{} reduce{}/{}/{} out{}|", dtypeShortName(p.dtype), p.rank, static_cast<int>(p.reduce),
                     p.reduce_axes, p.keepdims ? 1 : 0, dtypeShortName(p.out_dtype));
  for (const FusedProgram::Node& n : p.nodes) {
    out += fmt::format("{}({},{}){}{}", opIdent(n.op), n.a, n.b, n.rounded ? "" : "~",
                       n.constant ? fmt::format("={:a}", n.value) : std::string());
    out += ";";
  }
  out += "|out";
  for (int o : p.outputs) out += fmt::format(",{}", o);
  out += "|inplace";
  for (const auto& [leaf, ref] : p.in_place) out += fmt::format(",{}={}", leaf, ref);
  out += "|inner";
  for (int inner : p.leaf_inner) out += fmt::format(",{}", inner);
  out += "|leafdt";
  for (DType dtype : p.leaf_dtype) out += fmt::format(",{}", dtypeShortName(dtype));
  out += "|static";
  for (std::int64_t dim : p.static_dims) out += fmt::format(",{}", dim);
  out += "|div";
  for (std::int64_t divisor : p.divisors) out += fmt::format(",{}", divisor);
  out += "\n";
}

}  // namespace

std::string kernelCacheKey(const KernelFamily& family, const KernelSpec& spec, const std::string& code_identity,
                           const std::string& target_cpu) {
  std::string key = fmt::format("kernel {} {}\nattrs", family.name(), opIdent(spec.op));
  for (const AttrValue& attr : spec.attrs) {
    key += fmt::format(" {}:{}:{:a}:{}:[", static_cast<int>(attr.kind), attr.i, attr.f, dtypeShortName(attr.dtype));
    for (std::int64_t v : attr.ints) key += fmt::format("{},", v);
    key += "]";
  }
  key += "\ninputs ";
  for (const OperandSpec& in : spec.inputs) appendOperand(key, in);
  key += kDimsLine;
  for (const OperandSpec& in : spec.inputs) appendDims(key, in);
  key += "\nepilogue";
  for (const EpilogueStep& step : spec.epilogue) {
    key += fmt::format(" {}({}{})", opIdent(step.op), step.operand, step.swapped ? ",swapped" : "");
  }
  key += fmt::format("\nparams {}\ntarget {}x{}{}\n", spec.params.toString(), spec.target.vector_bits,
                     spec.target.vector_registers, spec.target.bf16_dot ? " bf16dot" : "");
  // A default over bfloat16 operands on a target with pair dot products: the variant it resolves
  // to on this CPU today (a kernel kept under the other verdict is another kernel).
  const bool bf16_operand = std::any_of(spec.inputs.begin(), spec.inputs.end(),
                                        [](const OperandSpec& in) { return in.dtype == DType::BFloat16; });
  if (bf16_operand && spec.target.bf16_dot && spec.params.bf16_dot == 0 && spec.params.library == 0) {
    key += fmt::format("bf16 default {}\n", bf16VariantName(bf16DefaultResolved(target_cpu)));
  }
  if (spec.fused) appendProgram(key, *spec.fused);
  if (!spec.fused_leaf_source.empty()) {
    key += "leaf sources";
    for (int source : spec.fused_leaf_source) key += fmt::format(" {}", source);
    key += "\n";
  }
  key += shapevmBuildIdentity() + "\n" + code_identity;
  return key;
}

std::string kernelShapeClass(std::string_view key) {
  const auto [begin, end] = dimsSpan(key);
  if (begin == std::string_view::npos) return std::string(key);
  return std::string(key.substr(0, begin)) + std::string(key.substr(end));
}

std::optional<KeyDims> kernelKeyDims(std::string_view key) {
  const auto [begin, end] = dimsSpan(key);
  if (begin == std::string_view::npos) return std::nullopt;
  KeyDims dims;
  std::vector<DimSpec> operand;  // until its ';'
  std::string_view text = key.substr(begin, end - begin);
  while (!text.empty()) {
    if (text.front() == ';') {
      dims.push_back(std::move(operand));
      operand.clear();
      text.remove_prefix(1);
      continue;
    }
    DimSpec dim;
    std::int64_t* fields[4] = {&dim.size, &dim.lo, &dim.hi, &dim.divisor};
    for (int f = 0; f < 4; ++f) {
      const auto [next, error] = std::from_chars(text.data(), text.data() + text.size(), *fields[f]);
      const char separator = f < 3 ? ':' : ',';
      if (error != std::errc() || next == text.data() + text.size() || *next != separator) return std::nullopt;
      text.remove_prefix(static_cast<std::size_t>(next - text.data()) + 1);
    }
    if (operand.size() >= static_cast<std::size_t>(kMaxRank)) return std::nullopt;
    operand.push_back(dim);
  }
  if (!operand.empty()) return std::nullopt;  // not closed by ';'
  return dims;
}

bool keyDimsCover(const KeyDims& outer, const KeyDims& inner) {
  if (outer.size() != inner.size()) return false;
  for (std::size_t i = 0; i < outer.size(); ++i) {
    if (outer[i].size() != inner[i].size()) return false;
    for (std::size_t d = 0; d < outer[i].size(); ++d) {
      if (!outer[i][d].guarded().covers(inner[i][d].guarded())) return false;
    }
  }
  return true;
}

const std::string& shapevmBuildIdentity() {
  static const std::string identity = [] {
    // The executable segments of the binary or library that holds this function (and the code
    // generators linked with it).
    struct Search {
      const void* address;
      std::uint64_t hash = 0;
      bool found = false;
    } search{reinterpret_cast<const void*>(&shapevmBuildIdentity)};
    dl_iterate_phdr(
        [](dl_phdr_info* info, std::size_t, void* data) -> int {
          auto* s = static_cast<Search*>(data);
          const auto target = reinterpret_cast<std::uintptr_t>(s->address);
          bool contains = false;
          for (int i = 0; i < info->dlpi_phnum; ++i) {
            const ElfW(Phdr)& ph = info->dlpi_phdr[i];
            const std::uintptr_t start = info->dlpi_addr + ph.p_vaddr;
            if (ph.p_type == PT_LOAD && target >= start && target < start + ph.p_memsz) contains = true;
          }
          if (!contains) return 0;
          std::uint64_t hash = 0x6A09E667F3BCC908ULL;
          for (int i = 0; i < info->dlpi_phnum; ++i) {
            const ElfW(Phdr)& ph = info->dlpi_phdr[i];
            if (ph.p_type != PT_LOAD || (ph.p_flags & PF_X) == 0) continue;
            hash = hashBytes(reinterpret_cast<const void*>(info->dlpi_addr + ph.p_vaddr), ph.p_filesz, hash);
          }
          s->hash = hash;
          s->found = true;
          return 1;
        },
        &search);
    return fmt::format("shapevm {} build {}", SHAPEVM_VERSION_STRING,
                       search.found ? fmt::format("{:016x}", search.hash) : std::string("unknown"));
  }();
  return identity;
}

namespace {
// A kept entry's code, loaded; an error when it does not define `symbol` or does not load.
Expected<KernelHandle> loadKept(KernelBackend& backend, const CachedCode& kept, const std::string& symbol) {
  if (kept.symbol != symbol) return makeError(ErrorCode::JitError, "it defines '{}', not '{}'", kept.symbol, symbol);
  SVM_ASSIGN_OR_RETURN(std::unique_ptr<KernelCode> code, backend.codeFromBytes(symbol, kept.bytes));
  return backend.load(std::move(code));
}

// `spec` with the dims of `dims` (one list per operand, in order); false when they do not fit.
bool applyKeyDims(KernelSpec& spec, const KeyDims& dims) {
  if (dims.size() != spec.inputs.size()) return false;
  for (std::size_t i = 0; i < dims.size(); ++i) {
    OperandSpec& operand = spec.inputs[i];
    if (dims[i].size() != static_cast<std::size_t>(operand.is_tensor ? operand.rank : 0)) return false;
    for (std::size_t d = 0; d < dims[i].size(); ++d) operand.dims[d] = dims[i][d];
  }
  return true;
}
}  // namespace

Expected<KernelHandle> compileThroughCache(KernelBackend& backend, const KernelFamily& family, KernelSpec& spec,
                                           std::string& symbol, std::string& key, bool& from_cache) {
  from_cache = false;
  key.clear();
  KernelCache* cache = backend.kernelCache();
  const std::string identity = cache != nullptr ? backend.codeIdentity() : std::string();
  if (!identity.empty()) {
    key = kernelCacheKey(family, spec, identity, backend.capabilities().target);
    if (std::optional<CachedCode> kept = cache->find(key)) {
      Expected<KernelHandle> handle = loadKept(backend, *kept, symbol);
      if (handle) {
        from_cache = true;
        backend.noteKernelFromCache();
        return handle;
      }
      cache->forget(key, handle.status().message());
    }
    // The same kernel kept for wider ranges: its code is right for every shape it was compiled
    // for, which includes every shape `spec` admits (validation still runs before install).
    std::optional<CachedCode> wider =
        Tunables::get(Tunable::CacheCovering) != 0 ? cache->findCovering(key) : std::nullopt;
    if (wider) {
      KernelSpec covering = spec;
      const std::optional<KeyDims> dims = kernelKeyDims(wider->key);
      Expected<KernelHandle> handle = makeError(ErrorCode::JitError, "its dims do not fit the kernel");
      if (dims && applyKeyDims(covering, *dims)) {
        const Status supported = family.supports(covering);
        handle = supported.isOk() ? loadKept(backend, *wider, wider->symbol) : Expected<KernelHandle>(supported);
      }
      if (handle) {
        logAt(LogLevel::Info, "JIT", "kernel cache: {} served by the kept kernel for {}", spec.signature(),
              covering.signature());
        spec = std::move(covering);
        symbol = wider->symbol;
        key = wider->key;
        from_cache = true;
        backend.noteKernelFromCache();
        return handle;
      }
      cache->forget(wider->key, handle.status().message());
    }
  }
  SVM_ASSIGN_OR_RETURN(std::unique_ptr<KernelCode> code, backend.compile(family, spec, symbol));
  if (!key.empty()) {
    const std::string_view bytes = backend.codeBytes(*code);
    if (!bytes.empty()) cache->store(CachedCode{key, symbol, std::string(bytes)});
  }
  return backend.load(std::move(code));
}

}  // namespace shapevm::jit
