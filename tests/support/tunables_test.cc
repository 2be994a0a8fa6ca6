// SPDX-License-Identifier: Apache-2.0
// The tunables table: every row has a name, key, env variable and meaning; values start at
// their defaults, set() is range-checked by enum, snake_case key and CamelCase name, the
// environment (SHAPEVM_<ENV>) overrides them with errors naming the variable, and
// resetToDefaults() restores every row. Each test leaves the table at its defaults.
#include "support/tunables.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <limits>
#include <set>
#include <string>

namespace shapevm {
namespace {

class TunablesTest : public testing::Test {
 protected:
  void SetUp() override { Tunables::resetToDefaults(); }
  void TearDown() override {
    for (const TunableInfo& row : Tunables::all()) unsetenv(std::string(row.env).c_str());
    Tunables::resetToDefaults();
  }
};

bool contains(const std::string& text, std::string_view part) { return text.find(part) != std::string::npos; }

TEST_F(TunablesTest, TableHasOneWellFormedRowPerEnumValue) {
  const auto& rows = Tunables::all();
  ASSERT_EQ(rows.size(), static_cast<std::size_t>(Tunable::kCount));
  std::set<std::string_view> names, keys, envs;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const TunableInfo& row = rows[i];
    SCOPED_TRACE(std::string(row.name));
    EXPECT_EQ(&Tunables::info(static_cast<Tunable>(i)), &row);
    EXPECT_FALSE(row.name.empty());
    EXPECT_FALSE(row.meaning.empty()) << "every tunable row needs a meaning";
    EXPECT_TRUE(row.name[0] >= 'A' && row.name[0] <= 'Z') << "names are CamelCase";
    for (char c : row.key) EXPECT_TRUE((c >= 'a' && c <= 'z') || c == '_' || (c >= '0' && c <= '9')) << row.key;
    EXPECT_EQ(row.env.substr(0, 8), "SHAPEVM_");
    // The key is the lower-cased env suffix.
    std::string lowered(row.env.substr(8));
    for (char& c : lowered) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
    EXPECT_EQ(row.key, lowered);
    EXPECT_LE(row.min_value, row.default_value);
    EXPECT_LE(row.default_value, row.max_value);
    EXPECT_TRUE(names.insert(row.name).second);
    EXPECT_TRUE(keys.insert(row.key).second);
    EXPECT_TRUE(envs.insert(row.env).second);
  }
}

TEST_F(TunablesTest, KnownRowsHaveTheirDocumentedDefaults) {
  const TunableInfo& hot = Tunables::info(Tunable::HotCount);
  EXPECT_EQ(hot.name, "HotCount");
  EXPECT_EQ(hot.key, "hot_count");
  EXPECT_EQ(hot.env, "SHAPEVM_HOT_COUNT");
  EXPECT_EQ(hot.default_value, 5);
  EXPECT_EQ(hot.min_value, 0);

  EXPECT_EQ(Tunables::info(Tunable::WarmupRuns).key, "warmup");
  EXPECT_EQ(Tunables::info(Tunable::AllocatorCacheBytes).env, "SHAPEVM_ALLOC_CACHE_BYTES");
  EXPECT_EQ(Tunables::info(Tunable::DefaultDynamicDim).key, "default_dim");

  EXPECT_EQ(Tunables::get(Tunable::WarmupRuns), 3);
  EXPECT_EQ(Tunables::get(Tunable::HotCount), 5);
  EXPECT_EQ(Tunables::get(Tunable::HotMs), 20);
  EXPECT_EQ(Tunables::get(Tunable::MaxRecompiles), 8);
  EXPECT_EQ(Tunables::get(Tunable::ProfileEntries), 16);
  EXPECT_EQ(Tunables::get(Tunable::MaxCallDepth), 200);
  EXPECT_EQ(Tunables::get(Tunable::MaxTensorBytes), std::int64_t{16} << 30);
  EXPECT_EQ(Tunables::get(Tunable::AllocatorCacheBytes), std::int64_t{1} << 30);
  EXPECT_EQ(Tunables::get(Tunable::DefaultDynamicDim), 8);
  EXPECT_EQ(Tunables::get(Tunable::MaxSteps), 1000000000);  // endless loops end by default (issue 24)
  EXPECT_EQ(Tunables::info(Tunable::MaxSteps).max_value, std::numeric_limits<std::int64_t>::max());
}

TEST_F(TunablesTest, EveryRowStartsAtItsDefault) {
  for (std::size_t i = 0; i < Tunables::all().size(); ++i) {
    EXPECT_EQ(Tunables::get(static_cast<Tunable>(i)), Tunables::all()[i].default_value) << Tunables::all()[i].name;
  }
}

TEST_F(TunablesTest, SetByEnumAcceptsTheInclusiveRange) {
  const TunableInfo& row = Tunables::info(Tunable::HotCount);
  ASSERT_TRUE(Tunables::set(Tunable::HotCount, row.min_value).isOk());
  EXPECT_EQ(Tunables::get(Tunable::HotCount), row.min_value);
  ASSERT_TRUE(Tunables::set(Tunable::HotCount, row.max_value).isOk());
  EXPECT_EQ(Tunables::get(Tunable::HotCount), row.max_value);
  ASSERT_TRUE(Tunables::set(Tunable::HotCount, 77).isOk());
  EXPECT_EQ(Tunables::get(Tunable::HotCount), 77);
}

TEST_F(TunablesTest, JitLevelAcceptsOptimizationLevelNames) {
  ASSERT_TRUE(Tunables::set("jit_level", "O1").isOk());
  EXPECT_EQ(Tunables::get(Tunable::JitLevel), 1);
  ASSERT_TRUE(Tunables::set("jit_level", "o0").isOk());
  EXPECT_EQ(Tunables::get(Tunable::JitLevel), 0);
  EXPECT_FALSE(Tunables::set("jit_level", "O3").isOk());
  EXPECT_FALSE(Tunables::set("jit_level", "fast").isOk());
  EXPECT_FALSE(Tunables::set("hot_count", "O1").isOk());  // only the JIT level takes the O prefix
}

TEST_F(TunablesTest, SetOutsideTheRangeFailsAndKeepsTheOldValue) {
  ASSERT_TRUE(Tunables::set(Tunable::HotCount, 9).isOk());
  Status below = Tunables::set(Tunable::HotCount, -1);
  EXPECT_EQ(below.code(), ErrorCode::InvalidArgument);
  EXPECT_EQ(below.message(), "tunable hot_count = -1 is outside its range [0, 1000000000]");
  Status above = Tunables::set(Tunable::HotCount, 1000000001);
  EXPECT_EQ(above.code(), ErrorCode::InvalidArgument);
  EXPECT_TRUE(contains(above.message(), "hot_count")) << above.message();
  EXPECT_TRUE(contains(above.message(), "1000000001")) << above.message();
  EXPECT_EQ(Tunables::get(Tunable::HotCount), 9);

  // Every row rejects min-1 and max+1 (where representable) and accepts its bounds.
  for (std::size_t i = 0; i < Tunables::all().size(); ++i) {
    const TunableInfo& row = Tunables::all()[i];
    auto t = static_cast<Tunable>(i);
    SCOPED_TRACE(std::string(row.name));
    EXPECT_TRUE(Tunables::set(t, row.min_value).isOk());
    EXPECT_TRUE(Tunables::set(t, row.max_value).isOk());
    if (row.min_value > std::numeric_limits<std::int64_t>::min()) {
      EXPECT_EQ(Tunables::set(t, row.min_value - 1).code(), ErrorCode::InvalidArgument);
    }
    if (row.max_value < std::numeric_limits<std::int64_t>::max()) {
      EXPECT_EQ(Tunables::set(t, row.max_value + 1).code(), ErrorCode::InvalidArgument);
    }
    EXPECT_EQ(Tunables::get(t), row.max_value);
  }
}

TEST_F(TunablesTest, SetByKeyAndByName) {
  ASSERT_TRUE(Tunables::set("hot_count", "12").isOk());
  EXPECT_EQ(Tunables::get(Tunable::HotCount), 12);
  ASSERT_TRUE(Tunables::set("HotCount", "13").isOk());
  EXPECT_EQ(Tunables::get(Tunable::HotCount), 13);
  ASSERT_TRUE(Tunables::set("MaxTensorBytes", "4096").isOk());
  EXPECT_EQ(Tunables::get(Tunable::MaxTensorBytes), 4096);
  ASSERT_TRUE(Tunables::set("alloc_cache_bytes", "0").isOk());
  EXPECT_EQ(Tunables::get(Tunable::AllocatorCacheBytes), 0);
  ASSERT_TRUE(Tunables::set("max_steps", "9223372036854775807").isOk());
  EXPECT_EQ(Tunables::get(Tunable::MaxSteps), std::numeric_limits<std::int64_t>::max());
  // Other rows are untouched.
  EXPECT_EQ(Tunables::get(Tunable::WarmupRuns), 3);
}

TEST_F(TunablesTest, KeysAreCaseSensitive) {
  EXPECT_EQ(Tunables::set("HOT_COUNT", "4").code(), ErrorCode::UnknownName);
  EXPECT_EQ(Tunables::set("hotcount", "4").code(), ErrorCode::UnknownName);
  EXPECT_EQ(Tunables::get(Tunable::HotCount), 5);
}

TEST_F(TunablesTest, SetByKeyRejectsNonIntegersNamingTheKey) {
  for (const char* bad : {"", "abc", "12abc", "1.5", " 7", "7 ", "0x10", "99999999999999999999"}) {
    SCOPED_TRACE(bad);
    Status status = Tunables::set("hot_count", bad);
    EXPECT_EQ(status.code(), ErrorCode::InvalidArgument);
    EXPECT_TRUE(contains(status.message(), "hot_count")) << status.message();
    EXPECT_TRUE(contains(status.message(), std::string("'") + bad + "'")) << status.message();
  }
  EXPECT_EQ(Tunables::set("hot_count", "abc").message(), "tunable hot_count: 'abc' is not an integer");
  EXPECT_EQ(Tunables::get(Tunable::HotCount), 5);
}

TEST_F(TunablesTest, SetByKeyRangeChecks) {
  Status status = Tunables::set("HotCount", "-3");
  EXPECT_EQ(status.code(), ErrorCode::InvalidArgument);
  EXPECT_EQ(status.message(), "tunable hot_count = -3 is outside its range [0, 1000000000]");
  EXPECT_EQ(Tunables::get(Tunable::HotCount), 5);
}

TEST_F(TunablesTest, UnknownKeyListsEveryKnownKey) {
  Status status = Tunables::set("hot_cuont", "3");
  EXPECT_EQ(status.code(), ErrorCode::UnknownName);
  EXPECT_TRUE(contains(status.message(), "unknown tunable 'hot_cuont'")) << status.message();
  for (const TunableInfo& row : Tunables::all()) {
    EXPECT_TRUE(contains(status.message(), row.key)) << row.key << " missing from: " << status.message();
  }
  EXPECT_TRUE(contains(status.message(), "warmup, hot_count, hot_ms")) << status.message();
}

TEST_F(TunablesTest, ResetToDefaultsRestoresEveryRow) {
  for (std::size_t i = 0; i < Tunables::all().size(); ++i) {
    ASSERT_TRUE(Tunables::set(static_cast<Tunable>(i), Tunables::all()[i].max_value).isOk());
  }
  Tunables::resetToDefaults();
  for (std::size_t i = 0; i < Tunables::all().size(); ++i) {
    EXPECT_EQ(Tunables::get(static_cast<Tunable>(i)), Tunables::all()[i].default_value) << Tunables::all()[i].name;
  }
}

TEST_F(TunablesTest, LoadFromEnvironmentAppliesVariables) {
  ASSERT_EQ(setenv("SHAPEVM_HOT_COUNT", "42", 1), 0);
  ASSERT_EQ(setenv("SHAPEVM_MAX_TENSOR_BYTES", "1048576", 1), 0);
  ASSERT_EQ(setenv("SHAPEVM_WARMUP", "0", 1), 0);
  ASSERT_TRUE(Tunables::loadFromEnvironment().isOk());
  EXPECT_EQ(Tunables::get(Tunable::HotCount), 42);
  EXPECT_EQ(Tunables::get(Tunable::MaxTensorBytes), 1048576);
  EXPECT_EQ(Tunables::get(Tunable::WarmupRuns), 0);
  EXPECT_EQ(Tunables::get(Tunable::HotMs), 20) << "rows without a variable keep their value";

  // Unsetting a variable does not revert the value; resetToDefaults does.
  unsetenv("SHAPEVM_HOT_COUNT");
  ASSERT_TRUE(Tunables::loadFromEnvironment().isOk());
  EXPECT_EQ(Tunables::get(Tunable::HotCount), 42);
  Tunables::resetToDefaults();
  EXPECT_EQ(Tunables::get(Tunable::HotCount), 5);
}

TEST_F(TunablesTest, LoadFromEnvironmentWithNoVariablesChangesNothing) {
  ASSERT_TRUE(Tunables::set(Tunable::HotMs, 99).isOk());
  ASSERT_TRUE(Tunables::loadFromEnvironment().isOk());
  EXPECT_EQ(Tunables::get(Tunable::HotMs), 99);
  EXPECT_EQ(Tunables::get(Tunable::HotCount), 5);
}

TEST_F(TunablesTest, MalformedEnvironmentValueNamesTheVariable) {
  ASSERT_EQ(setenv("SHAPEVM_HOT_COUNT", "lots", 1), 0);
  Status status = Tunables::loadFromEnvironment();
  EXPECT_EQ(status.code(), ErrorCode::InvalidArgument);
  EXPECT_EQ(status.message(), "environment variable SHAPEVM_HOT_COUNT: tunable hot_count: 'lots' is not an integer");
  EXPECT_EQ(Tunables::get(Tunable::HotCount), 5);
}

TEST_F(TunablesTest, OutOfRangeEnvironmentValueNamesTheVariable) {
  ASSERT_EQ(setenv("SHAPEVM_PROFILE_ENTRIES", "0", 1), 0);
  Status status = Tunables::loadFromEnvironment();
  EXPECT_EQ(status.code(), ErrorCode::InvalidArgument);
  EXPECT_TRUE(contains(status.message(), "SHAPEVM_PROFILE_ENTRIES")) << status.message();
  EXPECT_TRUE(contains(status.message(), "[1, 4096]")) << status.message();
  EXPECT_EQ(Tunables::get(Tunable::ProfileEntries), 16);
}

TEST_F(TunablesTest, EnvironmentRowsAreAppliedInTableOrderUntilTheFirstError) {
  // WarmupRuns precedes HotCount in the table; HotMs follows it.
  ASSERT_EQ(setenv("SHAPEVM_WARMUP", "11", 1), 0);
  ASSERT_EQ(setenv("SHAPEVM_HOT_COUNT", "x", 1), 0);
  ASSERT_EQ(setenv("SHAPEVM_HOT_MS", "33", 1), 0);
  Status status = Tunables::loadFromEnvironment();
  EXPECT_TRUE(contains(status.message(), "SHAPEVM_HOT_COUNT")) << status.message();
  EXPECT_EQ(Tunables::get(Tunable::WarmupRuns), 11);
  EXPECT_EQ(Tunables::get(Tunable::HotMs), 20);
}

TEST_F(TunablesTest, EveryRowIsSettableFromTheEnvironment) {
  for (const TunableInfo& row : Tunables::all()) {
    ASSERT_EQ(setenv(std::string(row.env).c_str(), std::to_string(row.min_value).c_str(), 1), 0);
  }
  ASSERT_TRUE(Tunables::loadFromEnvironment().isOk());
  for (std::size_t i = 0; i < Tunables::all().size(); ++i) {
    EXPECT_EQ(Tunables::get(static_cast<Tunable>(i)), Tunables::all()[i].min_value) << Tunables::all()[i].env;
  }
}

}  // namespace
}  // namespace shapevm
