// SPDX-License-Identifier: Apache-2.0
// Concurrency through the public Session API (issue 24, item 4): eight threads run one O2 Session
// while its compile thread profiles, compiles, installs and widens kernels and regions for the
// shapes they bring, and Sessions over different modules run in parallel threads, sharing the
// process's backend, kernel cache and tuning database. Every result equals an O0 Session's for
// the same inputs. Run under ThreadSanitizer by `scripts/test.sh --tsan`.
#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "session_inputs.h"
#include "shapevm/shapevm.h"
#include "support/tunables.h"

namespace shapevm {
namespace {

const std::string kExamples = std::string(SHAPEVM_SOURCE_DIR) + "/examples";

constexpr const char* kAxpy = R"(from shapevm import ops, Tensor


def axpy(x: Tensor["n", 4], y: Tensor["n", 4], a: float):
    return ops.tanh(x * a + y) - y
)";

// One input set and what an O0 Session returned for it.
struct Case {
  std::vector<Value> args;
  std::vector<Value> want;
};

using testing_inputs::randomArgs;
using testing_inputs::relL2;

// The largest relative L2 distance over the outputs, or -1 when their count or shapes differ.
double worstDistance(const std::vector<Value>& got, const std::vector<Value>& want) {
  if (got.size() != want.size()) return -1;
  double worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (got[i].tensor().shape() != want[i].tensor().shape()) return -1;
    worst = std::max(worst, relL2(got[i].tensor(), want[i].tensor()));
  }
  return worst;
}

class SessionConcurrency : public ::testing::Test {
 protected:
  void SetUp() override {
    Tunables::resetToDefaults();
    // Hot at once, so the compile thread works while the threads run.
    for (const char* key : {"hot_count", "hot_ms", "warmup"}) ASSERT_TRUE(Session::setTunable(key, "0").isOk());
    // A cache of its own: install records other tests left in a shared one would queue installs on
    // first sight instead of the tier-up these tests race against.
    cache_dir_ =
        std::filesystem::temp_directory_path() / ("svm_concurrency_" + std::to_string(::getpid()) + "_" +
                                                  ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(cache_dir_);
    std::filesystem::create_directories(cache_dir_);
    const char* before = std::getenv("SHAPEVM_CACHE_DIR");
    saved_cache_env_ = before != nullptr ? std::optional<std::string>(before) : std::nullopt;
    ::setenv("SHAPEVM_CACHE_DIR", cache_dir_.c_str(), 1);
  }
  void TearDown() override {
    Tunables::resetToDefaults();
    if (saved_cache_env_) {
      ::setenv("SHAPEVM_CACHE_DIR", saved_cache_env_->c_str(), 1);
    } else {
      ::unsetenv("SHAPEVM_CACHE_DIR");
    }
    std::error_code ignored;
    std::filesystem::remove_all(cache_dir_, ignored);
  }
  std::filesystem::path cache_dir_;
  std::optional<std::string> saved_cache_env_;

  static SessionOptions options() {
    SessionOptions o;
    o.tuning_cache = false;
    o.tune_budget_ms = 20;
    return o;
  }

  // Inputs for each of `dims` (two draws each) and the O0 results, computed on one thread.
  static std::vector<Case> cases(const std::string& path_or_source, bool is_path, std::vector<std::int64_t> dims,
                                 std::uint64_t seed) {
    Session reference(options());
    EXPECT_TRUE(reference.set("jit_level", "O0").isOk());
    LoadOptions load;
    EXPECT_TRUE((is_path ? reference.load(path_or_source) : reference.loadSource(path_or_source, load)).isOk());
    const FunctionInfo fn = reference.functions()[0];
    std::mt19937_64 rng(seed);
    std::vector<Case> out;
    for (int draw = 0; draw < 2; ++draw) {
      for (std::int64_t dim : dims) {
        Case c{randomArgs(fn, dim, rng), {}};
        auto want = reference.run(fn.index, c.args);
        EXPECT_TRUE(want.hasValue()) << want.status().toString();
        if (want) c.want = std::move(*want);
        out.push_back(std::move(c));
      }
    }
    return out;
  }

  // `threads` threads each run `rounds` cases of `cases` on `session`, in a thread-specific order;
  // returns how many results differed from O0 (beyond float rounding) or failed.
  static int runThreads(Session& session, const std::vector<Case>& cases, int threads, int rounds) {
    std::atomic<int> bad{0};
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        for (int r = 0; r < rounds; ++r) {
          const Case& c = cases[static_cast<std::size_t>(t * 5 + r * 3) % cases.size()];
          auto got = session.run(0, c.args);
          if (!got) {
            ADD_FAILURE() << "thread " << t << ": " << got.status().toString();
            ++bad;
            continue;
          }
          const double distance = worstDistance(*got, c.want);
          if (distance < 0 || distance > 1e-5) {
            ADD_FAILURE() << "thread " << t << " round " << r << ": relative L2 " << distance;
            ++bad;
          }
        }
      });
    }
    for (std::thread& th : pool) th.join();
    return bad.load();
  }
};

TEST_F(SessionConcurrency, EightThreadsOnOneO2SessionWhileItsKernelsInstallMatchO0) {
  if (!Session::jitAvailable()) GTEST_SKIP() << "built without the JIT";
  const std::string cell = kExamples + "/lstm_cell.py";
  const std::vector<Case> inputs = cases(cell, true, {2, 3, 5, 9}, 11);
  Session session(options());
  ASSERT_TRUE(session.set("jit_level", "O2").isOk());
  ASSERT_TRUE(session.load(cell).isOk());
  ASSERT_TRUE(session.jitStatus().isOk()) << session.jitStatus().toString();
  // Round one races the compile thread (nothing waits for it); round two runs what it installed.
  EXPECT_EQ(runThreads(session, inputs, 8, 6), 0);
  session.waitIdle();
  EXPECT_EQ(runThreads(session, inputs, 8, 6), 0);
  const SessionStats stats = session.stats();
  EXPECT_EQ(stats.runs, 96u);
  EXPECT_GT(stats.kernels_installed, 0u) << stats.jit_report;
  EXPECT_GT(stats.launches_compiled, 0u) << stats.jit_report;
  EXPECT_EQ(stats.compile_failures, 0u) << stats.jit_report;
}

TEST_F(SessionConcurrency, SessionsOverDifferentModulesRunInParallel) {
  if (!Session::jitAvailable()) GTEST_SKIP() << "built without the JIT";
  const std::string cell = kExamples + "/lstm_cell.py";
  const std::vector<Case> cell_inputs = cases(cell, true, {2, 7}, 12);
  const std::vector<Case> axpy_inputs = cases(kAxpy, false, {1, 6, 33}, 13);
  std::vector<std::unique_ptr<Session>> sessions;
  for (int s = 0; s < 4; ++s) {
    sessions.push_back(std::make_unique<Session>(options()));
    ASSERT_TRUE(sessions.back()->set("jit_level", s % 2 == 0 ? "O2" : "O1").isOk());
    ASSERT_TRUE((s < 2 ? sessions.back()->load(cell) : sessions.back()->loadSource(kAxpy)).isOk());
  }
  std::atomic<int> bad{0};
  std::vector<std::thread> pool;
  for (int s = 0; s < 4; ++s) {
    pool.emplace_back(
        [&, s] { bad += runThreads(*sessions[static_cast<std::size_t>(s)], s < 2 ? cell_inputs : axpy_inputs, 2, 5); });
  }
  for (std::thread& th : pool) th.join();
  EXPECT_EQ(bad.load(), 0);
  for (auto& session : sessions) {
    session->waitIdle();
    EXPECT_EQ(session->stats().runs, 10u);
    EXPECT_EQ(session->stats().compile_failures, 0u);
  }
}

}  // namespace
}  // namespace shapevm
