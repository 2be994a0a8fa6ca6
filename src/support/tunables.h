// SPDX-License-Identifier: Apache-2.0
// Typed access to the tunables table (tunables.def). Values live in one process-wide table;
// reads are relaxed atomic loads so the interpreter and the compile thread can both read them.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "shapevm/status.h"

namespace shapevm {

enum class Tunable : std::uint8_t {
#define SVM_TUNABLE(name, env, type, def, lo, hi, meaning) name,
#include "support/tunables.def"
#undef SVM_TUNABLE
  kCount
};

struct TunableInfo {
  std::string_view name;      // "HotCount"
  std::string_view key;       // "hot_count" (CLI --set key=value)
  std::string_view env;       // "SHAPEVM_HOT_COUNT"
  std::int64_t default_value;
  std::int64_t min_value;
  std::int64_t max_value;
  std::string_view meaning;
};

class Tunables {
 public:
  static std::int64_t get(Tunable t) {
    return values_[static_cast<std::size_t>(t)].load(std::memory_order_relaxed);
  }
  // Range-checked; the error names the tunable and its valid range.
  static Status set(Tunable t, std::int64_t value);
  // `key` is the snake_case key or the CamelCase name.
  static Status set(std::string_view key, std::string_view value);
  static void resetToDefaults();
  // Applies SHAPEVM_<ENV> variables; a malformed value is an error naming the variable.
  static Status loadFromEnvironment();
  static const TunableInfo& info(Tunable t);
  static const std::vector<TunableInfo>& all();

 private:
  static std::atomic<std::int64_t> values_[static_cast<std::size_t>(Tunable::kCount)];
};

}  // namespace shapevm
