// SPDX-License-Identifier: Apache-2.0
// The tuning database on disk (see tuning_db.h): kernel keys, JSON lines, checked loading and
// locked appends.
#include "tune/tuning_db.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "jit/fusion.h"
#include "support/cache_dir.h"
#include "support/logging.h"

namespace shapevm::tune {

namespace {

std::uint64_t fnv1a(std::string_view text, std::uint64_t hash = 0xcbf29ce484222325ULL) {
  for (unsigned char c : text) {
    hash ^= c;
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

std::string hashKey(const std::string& family, const std::string& kernel, const std::string& bucket,
                    const std::string& cpu, const std::string& features) {
  std::uint64_t hash = 0xcbf29ce484222325ULL;
  for (const std::string* part : {&family, &kernel, &bucket, &cpu, &features}) {
    hash = fnv1a(*part, hash);
    hash = fnv1a(std::string_view("\x1f", 1), hash);  // separator: ("ab","c") != ("a","bc")
  }
  return fmt::format("{:016x}", hash);
}

}  // namespace

std::string defaultCacheDir() {
  return shapevm::defaultCacheDir();
}

std::string KernelKey::key() const { return hashKey(family, kernel, bucket, cpu, features); }

KernelKey kernelKey(const jit::KernelFamily& family, const jit::KernelSpec& spec, const std::string& cpu,
                    const std::string& features) {
  KernelKey key;
  key.family = std::string(family.name());
  key.cpu = cpu;
  // The host's feature list in a canonical order (LLVM reports it in hash-map order).
  std::vector<std::string> words;
  for (std::size_t pos = 0; pos < features.size();) {
    const std::size_t end = std::min(features.find(' ', pos), features.size());
    if (end > pos) words.push_back(features.substr(pos, end - pos));
    pos = end + 1;
  }
  std::sort(words.begin(), words.end());
  for (const std::string& word : words) key.features += (key.features.empty() ? "" : " ") + word;
  std::string kernel = fmt::format("{}|", jit::opIdent(spec.op));
  for (std::size_t a = 0; a < spec.attrs.size(); ++a) kernel += (a ? "," : "") + spec.attrs[a].toString();
  std::string shape_class = fmt::format("{}|{}", key.family, jit::opIdent(spec.op));
  std::string bucket;
  for (std::size_t i = 0; i < spec.inputs.size(); ++i) {
    const jit::OperandSpec& in = spec.inputs[i];
    kernel += "|";
    shape_class += "|";
    bucket += i ? ";" : "";
    if (!in.is_tensor) {
      kernel += fmt::format("scalar{}", static_cast<int>(in.scalar_kind));
      shape_class += "scalar";
      continue;
    }
    // Static dims belong to the kernel; dynamic dims are '?' there and their ranges form the bucket.
    kernel += fmt::format("{}[", dtypeShortName(in.dtype));
    shape_class += fmt::format("{}r{}", dtypeShortName(in.dtype), in.rank);
    for (int d = 0; d < in.rank; ++d) {
      const jit::DimSpec& dim = in.dims[d];
      kernel += (d ? "," : "") + (dim.isStatic() ? std::to_string(dim.size) : std::string("?"));
      if (!dim.isStatic()) {
        bucket += fmt::format("{}{}:", bucket.empty() || bucket.back() == ';' ? "" : ",", d);
        bucket += dim.hi == INT64_MAX ? fmt::format("{}..", dim.lo) : fmt::format("{}..{}", dim.lo, dim.hi);
        if (dim.divisor > 1) bucket += fmt::format("%{}", dim.divisor);
      }
    }
    kernel += in.contiguous ? "]" : "]strided";
  }
  if (spec.fused) {
    // The whole dataflow: two programs with the same ops but other wiring are other kernels.
    const jit::FusedProgram& p = *spec.fused;
    kernel += fmt::format("|fused:{}r{}:", dtypeShortName(p.dtype), p.rank);
    for (const jit::FusedProgram::Node& node : p.nodes) kernel += fmt::format("{}({},{})", jit::opIdent(node.op), node.a, node.b);
    kernel += "->";
    for (int out : p.outputs) kernel += fmt::format("{},", out);
    kernel += "inner:";
    for (int inner : p.leaf_inner) kernel += fmt::format("{},", inner);
    if (!spec.fused_leaf_source.empty()) {
      kernel += "gates:";
      for (int source : spec.fused_leaf_source) kernel += fmt::format("{},", source);
    }
  }
  for (const jit::EpilogueStep& step : spec.epilogue) {
    kernel += fmt::format("|epi:{}({}{})", jit::opIdent(step.op), step.operand, step.swapped ? ",swapped" : "");
  }
  key.kernel = std::move(kernel);
  key.bucket = std::move(bucket);
  key.shape_class = std::move(shape_class);
  return key;
}

namespace {
// The record's own checksum: a hash of every other field as written, so an edited line (params,
// times, key parts) is detected rather than trusted.
std::string checksum(const nlohmann::ordered_json& fields) { return fmt::format("{:016x}", fnv1a(fields.dump())); }
}  // namespace

TuningRecord recordOf(const KernelKey& key) {
  TuningRecord record;
  record.key = key.key();
  record.family = key.family;
  record.kernel = key.kernel;
  record.bucket = key.bucket;
  record.shape_class = key.shape_class;
  record.cpu = key.cpu;
  record.features = key.features;
  return record;
}

std::string_view implName(const jit::KernelParams& params) {
  switch (params.library) {
    case 0: return "jit";
    case 2: return "onednn+tail";
    case 3: return "sgemm";
    case 4: return "sgemm+tail";
    default: return "onednn";
  }
}

std::string recordToJson(const TuningRecord& r) {
  nlohmann::ordered_json j;
  j["key"] = r.key;
  j["family"] = r.family;
  j["signature"] = r.signature;
  j["kernel"] = r.kernel;
  j["bucket"] = r.bucket;
  j["class"] = r.shape_class;
  j["point"] = r.point;
  j["cpu"] = r.cpu;
  j["features"] = r.features;
  j["params"] = r.params.toString();
  j["impl"] = std::string(implName(r.params));
  j["us"] = r.us;
  j["default_us"] = r.default_us;
  j["candidates"] = r.candidates;
  j["timed"] = r.timed;
  if (!r.bf16.empty()) j["bf16"] = r.bf16;
  if (r.bf16_pairs_us > 0 && r.bf16_widening_us > 0) {
    j["bf16_pairs_us"] = r.bf16_pairs_us;
    j["bf16_widening_us"] = r.bf16_widening_us;
  }
  if (!r.times.empty()) {
    nlohmann::ordered_json times = nlohmann::ordered_json::array();
    for (const TuningRecord::Timed& t : r.times) times.push_back({t.params.toString(), t.us});
    j["times"] = std::move(times);
  }
  j["version"] = r.version;
  j["check"] = checksum(j);
  return j.dump();
}

Expected<TuningRecord> parseRecord(const std::string& line) {
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return makeError(ErrorCode::ParseError, "not valid JSON");
  if (!j.is_object()) return makeError(ErrorCode::ParseError, "not a JSON object");
  TuningRecord r;
  auto text = [&](const char* name, std::string& out) -> Status {
    auto it = j.find(name);
    if (it == j.end() || !it->is_string()) return makeError(ErrorCode::ParseError, "field '{}' is missing or not a string", name);
    out = it->get<std::string>();
    return Status::ok();
  };
  auto number = [&](const char* name, double& out) -> Status {
    auto it = j.find(name);
    if (it == j.end() || !it->is_number()) return makeError(ErrorCode::ParseError, "field '{}' is missing or not a number", name);
    out = it->get<double>();
    if (!std::isfinite(out) || out < 0) return makeError(ErrorCode::ParseError, "field '{}' is {} (not a finite time)", name, out);
    return Status::ok();
  };
  auto integer = [&](const char* name, int& out) -> Status {
    auto it = j.find(name);
    if (it == j.end() || !it->is_number_integer()) {
      return makeError(ErrorCode::ParseError, "field '{}' is missing or not an integer", name);
    }
    out = it->get<int>();
    return Status::ok();
  };
  SVM_RETURN_IF_ERROR(integer("version", r.version));
  if (r.version != kTuningDbVersion) {
    return makeError(ErrorCode::ParseError, "version {} (this ShapeVM reads version {})", r.version, kTuningDbVersion);
  }
  std::string params;
  SVM_RETURN_IF_ERROR(text("key", r.key));
  SVM_RETURN_IF_ERROR(text("family", r.family));
  SVM_RETURN_IF_ERROR(text("signature", r.signature));
  SVM_RETURN_IF_ERROR(text("kernel", r.kernel));
  SVM_RETURN_IF_ERROR(text("bucket", r.bucket));
  SVM_RETURN_IF_ERROR(text("class", r.shape_class));
  SVM_RETURN_IF_ERROR(text("cpu", r.cpu));
  SVM_RETURN_IF_ERROR(text("features", r.features));
  SVM_RETURN_IF_ERROR(text("params", params));
  SVM_RETURN_IF_ERROR(number("us", r.us));
  SVM_RETURN_IF_ERROR(number("default_us", r.default_us));
  SVM_RETURN_IF_ERROR(integer("candidates", r.candidates));
  SVM_RETURN_IF_ERROR(integer("timed", r.timed));
  if (j.contains("bf16")) {
    SVM_RETURN_IF_ERROR(text("bf16", r.bf16));
    if (r.bf16 != "pairs" && r.bf16 != "widening") {
      return makeError(ErrorCode::ParseError, "field 'bf16' is '{}' (not 'pairs' or 'widening')", r.bf16);
    }
  }
  if (j.contains("bf16_pairs_us") || j.contains("bf16_widening_us")) {
    SVM_RETURN_IF_ERROR(number("bf16_pairs_us", r.bf16_pairs_us));
    SVM_RETURN_IF_ERROR(number("bf16_widening_us", r.bf16_widening_us));
  }
  if (auto it = j.find("point"); it != j.end()) {
    if (!it->is_array()) return makeError(ErrorCode::ParseError, "field 'point' is not an array");
    for (const auto& x : *it) {
      if (!x.is_number() || !std::isfinite(x.get<double>())) return makeError(ErrorCode::ParseError, "field 'point' holds a non-number");
      r.point.push_back(x.get<double>());
    }
  }
  if (auto it = j.find("times"); it != j.end()) {
    if (!it->is_array()) return makeError(ErrorCode::ParseError, "field 'times' is not an array");
    for (const auto& entry : *it) {
      if (!entry.is_array() || entry.size() != 2 || !entry[0].is_string() || !entry[1].is_number()) {
        return makeError(ErrorCode::ParseError, "field 'times' holds {} (not a [params, us] pair)", entry.dump());
      }
      auto timed = jit::KernelParams::parse(entry[0].get<std::string>());
      const double us = entry[1].get<double>();
      if (!timed) return makeError(ErrorCode::ParseError, "field 'times': {}", timed.status().message());
      if (!std::isfinite(us) || us <= 0)
        return makeError(ErrorCode::ParseError, "field 'times' holds a time of {}", us);
      r.times.push_back({*timed, us});
    }
  }
  auto parsed = jit::KernelParams::parse(params);
  if (!parsed) return makeError(ErrorCode::ParseError, "params '{}': {}", params, parsed.status().message());
  r.params = *parsed;
  if (auto it = j.find("impl"); it != j.end() && (!it->is_string() || it->get<std::string>() != implName(r.params))) {
    return makeError(ErrorCode::ParseError, "field 'impl' does not name the implementation params '{}' choose ('{}')",
                     params, implName(r.params));
  }
  std::string check;
  SVM_RETURN_IF_ERROR(text("check", check));
  nlohmann::ordered_json fields = j;
  fields.erase("check");
  if (checksum(fields) != check) return makeError(ErrorCode::ParseError, "checksum mismatch (the line was edited or corrupted)");
  if (hashKey(r.family, r.kernel, r.bucket, r.cpu, r.features) != r.key) {
    return makeError(ErrorCode::ParseError, "key {} does not match the record's own fields (edited or corrupted)", r.key);
  }
  return r;
}

jit::Bf16Variant bf16Verdict(const std::vector<TuningRecord>& records, const std::string& cpu,
                             const std::string& features) {
  double log_ratio = 0;
  int measured = 0;
  for (const TuningRecord& r : records) {
    if (r.cpu != cpu || r.features != features || !(r.bf16_pairs_us > 0) || !(r.bf16_widening_us > 0)) continue;
    log_ratio += std::log(r.bf16_pairs_us / r.bf16_widening_us);
    ++measured;
  }
  if (measured == 0) return jit::Bf16Variant::Unmeasured;
  return log_ratio <= 0 ? jit::Bf16Variant::Pairs : jit::Bf16Variant::Widening;
}

TuningDatabase::TuningDatabase(TuningDatabase&& other) noexcept
    : path_(std::move(other.path_)), records_(std::move(other.records_)), warnings_(std::move(other.warnings_)) {}

TuningDatabase& TuningDatabase::operator=(TuningDatabase&& other) noexcept {
  path_ = std::move(other.path_);
  records_ = std::move(other.records_);
  warnings_ = std::move(other.warnings_);
  return *this;
}

TuningDatabase TuningDatabase::open(std::string path) {
  TuningDatabase db;
  db.path_ = std::move(path);
  std::ifstream in(db.path_, std::ios::binary);
  if (!in) return db;  // no database yet
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    const bool complete = !in.eof();  // getline stopped at a '\n' (the last line may lack one)
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto record = parseRecord(line);
    if (!record) {
      db.warn(fmt::format("{}:{}: {}; line ignored", db.path_, number,
                          complete ? record.status().message() : "truncated last line, " + record.status().message()));
      continue;
    }
    db.records_[record->key] = std::move(*record);
  }
  return db;
}

void TuningDatabase::warn(std::string message) {
  logAt(LogLevel::Warn, "tune", "tuning database {}", message);
  std::lock_guard<std::mutex> lock(mutex_);
  warnings_.push_back(std::move(message));
}

std::vector<std::string> TuningDatabase::warnings() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return warnings_;
}

std::size_t TuningDatabase::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return records_.size();
}

std::optional<TuningRecord> TuningDatabase::find(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = records_.find(key);
  if (it == records_.end()) return std::nullopt;
  return it->second;
}

std::vector<TuningRecord> TuningDatabase::similar(const std::string& shape_class, const std::string& cpu,
                                                  const std::string& features) const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<TuningRecord> out;
  for (const auto& [key, record] : records_) {
    if (record.shape_class == shape_class && record.cpu == cpu && record.features == features) out.push_back(record);
  }
  return out;
}

std::vector<TuningRecord> TuningDatabase::records() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<TuningRecord> out;
  for (const auto& [key, record] : records_) out.push_back(record);
  return out;
}

void TuningDatabase::forget(const std::string& key) {
  std::lock_guard<std::mutex> lock(mutex_);
  records_.erase(key);
}

Status TuningDatabase::append(const TuningRecord& record) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    records_[record.key] = record;
  }
  if (path_.empty()) return Status::ok();
  std::error_code ec;
  const std::filesystem::path dir = std::filesystem::path(path_).parent_path();
  if (!dir.empty()) std::filesystem::create_directories(dir, ec);
  if (ec) return makeError(ErrorCode::IoError, "cannot create the cache directory '{}': {}", dir.string(), ec.message());
  const int fd = ::open(path_.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return makeError(ErrorCode::IoError, "cannot open '{}' for appending: {}", path_, std::strerror(errno));
  // Other processes append too: hold the lock while checking the tail and writing the line.
  ::flock(fd, LOCK_EX);
  std::string line = recordToJson(record) + "\n";
  struct stat info {};
  if (::fstat(fd, &info) == 0 && info.st_size > 0) {
    char last = '\n';
    if (::pread(fd, &last, 1, info.st_size - 1) == 1 && last != '\n') line.insert(line.begin(), '\n');  // after a torn line
  }
  const ssize_t written = ::write(fd, line.data(), line.size());
  const int saved = errno;
  ::flock(fd, LOCK_UN);
  ::close(fd);
  if (written != static_cast<ssize_t>(line.size())) {
    return makeError(ErrorCode::IoError, "cannot append to '{}': {}", path_, written < 0 ? std::strerror(saved) : "short write");
  }
  return Status::ok();
}

}  // namespace shapevm::tune
