// SPDX-License-Identifier: Apache-2.0
// The tunables table's storage, defaults and the API/env/CLI setters.
#include "support/tunables.h"

#include <charconv>
#include <cstdlib>

namespace shapevm {
namespace {
std::string snakeCase(std::string_view env) {
  std::string out(env);
  for (char& c : out) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  return out;
}
std::vector<TunableInfo> buildInfo() {
  static std::vector<std::string> keys;
  std::vector<TunableInfo> rows;
#define SVM_TUNABLE(name, env, type, def, lo, hi, meaning) \
  keys.push_back(snakeCase(#env));
#include "support/tunables.def"
#undef SVM_TUNABLE
  std::size_t i = 0;
#define SVM_TUNABLE(name, env, type, def, lo, hi, meaning) \
  rows.push_back(TunableInfo{#name, keys[i++], "SHAPEVM_" #env, static_cast<std::int64_t>(def), \
                             static_cast<std::int64_t>(lo), static_cast<std::int64_t>(hi), meaning});
#include "support/tunables.def"
#undef SVM_TUNABLE
  return rows;
}
}  // namespace

std::atomic<std::int64_t> Tunables::values_[static_cast<std::size_t>(Tunable::kCount)] = {
#define SVM_TUNABLE(name, env, type, def, lo, hi, meaning) static_cast<std::int64_t>(def),
#include "support/tunables.def"
#undef SVM_TUNABLE
};

const std::vector<TunableInfo>& Tunables::all() {
  static const std::vector<TunableInfo> rows = buildInfo();
  return rows;
}

const TunableInfo& Tunables::info(Tunable t) { return all()[static_cast<std::size_t>(t)]; }

Status Tunables::set(Tunable t, std::int64_t value) {
  const TunableInfo& row = info(t);
  if (value < row.min_value || value > row.max_value) {
    return makeError(ErrorCode::InvalidArgument, "tunable {} = {} is outside its range [{}, {}]", row.key, value,
                     row.min_value, row.max_value);
  }
  values_[static_cast<std::size_t>(t)].store(value, std::memory_order_relaxed);
  return Status::ok();
}

Status Tunables::set(std::string_view key, std::string_view value) {
  for (std::size_t i = 0; i < all().size(); ++i) {
    const TunableInfo& row = all()[i];
    if (row.key != key && row.name != key) continue;
    std::int64_t parsed = 0;
    // The JIT level is also written as an optimization level: O0 / O1 / O2.
    if (static_cast<Tunable>(i) == Tunable::JitLevel && value.size() == 2 && (value[0] == 'O' || value[0] == 'o')) {
      value.remove_prefix(1);
    }
    // The kernel thread count is also written as the word "auto" (0).
    if (static_cast<Tunable>(i) == Tunable::KernelThreads && value == "auto") value = "0";
    auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), parsed);
    if (ec != std::errc() || end != value.data() + value.size()) {
      return makeError(ErrorCode::InvalidArgument, "tunable {}: '{}' is not an integer", row.key, value);
    }
    return set(static_cast<Tunable>(i), parsed);
  }
  std::string known;
  for (const TunableInfo& row : all()) known += (known.empty() ? "" : ", ") + std::string(row.key);
  return makeError(ErrorCode::UnknownName, "unknown tunable '{}' (known: {})", key, known);
}

void Tunables::resetToDefaults() {
  for (std::size_t i = 0; i < all().size(); ++i) values_[i].store(all()[i].default_value, std::memory_order_relaxed);
}

Status Tunables::loadFromEnvironment() {
  for (const TunableInfo& row : all()) {
    const char* text = std::getenv(std::string(row.env).c_str());
    if (text == nullptr) continue;
    Status status = set(row.key, text);
    if (!status.isOk()) return status.withContext(fmt::format("environment variable {}", row.env));
  }
  return Status::ok();
}

}  // namespace shapevm
