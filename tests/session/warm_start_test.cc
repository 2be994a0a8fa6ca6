// SPDX-License-Identifier: Apache-2.0
// Session::warmStart (issues 23, 26): a session on a kernel cache an earlier session filled installs,
// before its first call and on the calling thread, every site and fused range the install records
// list, from the cached code with zero LLVM codegen, so its first call runs compiled (at the
// default tunables, where tier-up would keep it interpreted for several calls) and equals O0 on
// random inputs. A corrupted cache entry or a kernel that fails validation is rejected and the
// results stay right; an empty cache, another program, O0 and a cancelled warm start install
// nothing and stop nothing. Each test has its own cache directory.
#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "session_inputs.h"
#include "shapevm/shapevm.h"
#include "support/tunables.h"

namespace shapevm {
namespace {

namespace fs = std::filesystem;
using testing_inputs::randomArgs;
using testing_inputs::relL2;

const std::string kCell = std::string(SHAPEVM_SOURCE_DIR) + "/examples/lstm_cell.py";

constexpr const char* kAxpy = R"(from shapevm import ops, Tensor


def axpy(x: Tensor["n", 4], y: Tensor["n", 4], a: float):
    return x * a + y
)";

class WarmStartTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!Session::jitAvailable()) GTEST_SKIP() << "built without the JIT";
    Tunables::resetToDefaults();
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = (fs::temp_directory_path() / ("svm-warm-" + std::to_string(::getpid()) + "-" + info->name())).string();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    Tunables::resetToDefaults();
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }

  // The kernel cache and the tuning database in this test's directory.
  SessionOptions options(bool wait = false) const {
    SessionOptions out;
    out.tuning_db = dir_ + "/tuning.jsonl";
    out.tune_budget_ms = 50;
    out.jit_wait = wait;
    return out;
  }

  // An earlier process: the cell tiered up at `level` on a few shapes (every region hot at once,
  // each run waiting for its compiles), leaving kernels and install records in the directory.
  void fillCache(const char* level, std::vector<std::int64_t> dims = {4}) {
    for (const char* key : {"hot_count", "hot_ms", "warmup"}) ASSERT_TRUE(Session::setTunable(key, "0").isOk());
    {
      Session earlier(options(true));
      ASSERT_TRUE(earlier.set("jit_level", level).isOk());
      ASSERT_TRUE(earlier.load(kCell).isOk());
      const FunctionInfo fn = earlier.functions()[0];
      std::mt19937_64 rng(3);
      for (int r = 0; r < 4; ++r) {
        for (std::int64_t dim : dims) ASSERT_TRUE(earlier.run(fn.index, randomArgs(fn, dim, rng)).hasValue());
      }
      earlier.waitIdle();
      ASSERT_GT(earlier.stats().kernels_installed, 0u);
    }
    Tunables::resetToDefaults();  // the later sessions: default tier-up (3 interpreted warm-up calls)
  }

  // `calls` calls of `session` (the cell) on fresh random inputs of the recorded shape, each
  // compared with O0; false at the first mismatch.
  static bool matchesO0(Session& session, int calls, std::uint64_t seed, std::int64_t dim = 4) {
    Session reference;
    EXPECT_TRUE(reference.set("jit_level", "O0").isOk());
    EXPECT_TRUE(reference.load(kCell).isOk());
    const FunctionInfo fn = session.functions()[0];
    std::mt19937_64 rng(seed);
    for (int c = 0; c < calls; ++c) {
      const std::vector<Value> args = randomArgs(fn, dim, rng);
      auto got = session.run(fn.index, args);
      auto want = reference.run(fn.index, args);
      if (!got || !want || got->size() != want->size()) return false;
      for (std::size_t i = 0; i < got->size(); ++i) {
        if (!((*got)[i].tensor().shape() == (*want)[i].tensor().shape())) return false;
        if (!(relL2((*got)[i].tensor(), (*want)[i].tensor()) <= 1e-5)) return false;
      }
    }
    return true;
  }

  // A later process: a session on this test's cache at `level`, the cell loaded and warm-started.
  std::unique_ptr<Session> startWarm(const char* level, WarmStartResult& result, const WarmStartOptions& warm = {},
                                     bool wait = false) const {
    auto session = std::make_unique<Session>(options(wait));
    EXPECT_TRUE(session->set("jit_level", level).isOk());
    EXPECT_TRUE(session->load(kCell).isOk());
    auto outcome = session->warmStart(warm);
    EXPECT_TRUE(outcome.hasValue()) << outcome.status().toString();
    if (outcome) result = *outcome;
    return session;
  }

  std::vector<fs::path> kernelFiles() const {
    std::vector<fs::path> files;
    for (const auto& entry : fs::directory_iterator(dir_ + "/kernels")) {
      if (entry.path().extension() == ".svmk") files.push_back(entry.path());
    }
    return files;
  }

  std::string dir_;
};

TEST_F(WarmStartTest, TheFirstCallRunsCompiledWithZeroCodegenAtO2) {
  fillCache("O2");
  {
    // The control: without a warm start, first sight installs only after the first call.
    Session plain(options());
    ASSERT_TRUE(plain.set("jit_level", "O2").isOk());
    ASSERT_TRUE(plain.load(kCell).isOk());
    ASSERT_TRUE(matchesO0(plain, 1, 10));
    EXPECT_EQ(plain.stats().launches_compiled, 0u);
  }
  WarmStartResult result;
  const std::unique_ptr<Session> session = startWarm("O2", result);
  Session& later = *session;
  EXPECT_GT(result.installed, 0) << result.summary();
  EXPECT_EQ(result.failed, 0) << result.summary();
  EXPECT_EQ(result.codegens, 0u) << result.summary();
  EXPECT_TRUE(result.note.empty()) << result.note;
  bool region = false;
  for (const WarmStartEntry& entry : result.entries)
    region = region || (entry.kind == "region" && entry.outcome == "installed");
  EXPECT_TRUE(region) << result.summary();
  for (const WarmStartEntry& entry : result.entries) {
    std::printf("  %s %s pc=%d %s: %s\n", entry.function.c_str(), entry.kind.c_str(), entry.pc, entry.outcome.c_str(),
                entry.reason.c_str());
  }
  std::printf("  %s\n", result.summary().c_str());
  const SessionStats installed = later.stats();
  EXPECT_EQ(installed.runs, 0u);
  EXPECT_GT(installed.kernels_installed, 0u);

  ASSERT_TRUE(matchesO0(later, 1, 11));
  const SessionStats first = later.stats();
  EXPECT_GT(first.launches_compiled, 0u) << "call 1 ran interpreted after the warm start";
  EXPECT_EQ(first.codegen_count, 0u);
  ASSERT_TRUE(matchesO0(later, 3, 12));
}

TEST_F(WarmStartTest, ARegionRecordedForSeveralShapesServesEachFromItsFirstCall) {
  // The earlier session widened its region over three shapes (recompiles after region declines):
  // the warm start plans the range for every recorded shape at once, so no call of any of them
  // runs an op interpreted, and no LLVM codegen runs.
  fillCache("O2", {2, 9, 5});
  WarmStartResult result;
  const std::unique_ptr<Session> session = startWarm("O2", result);
  Session& later = *session;
  EXPECT_GT(result.installed, 0) << result.summary();
  EXPECT_EQ(result.codegens, 0u) << result.summary();
  std::uint64_t seed = 70;
  for (std::int64_t dim : {5, 2, 9}) {
    const SessionStats before = later.stats();
    ASSERT_TRUE(matchesO0(later, 1, ++seed, dim));
    const SessionStats after = later.stats();
    EXPECT_GT(after.launches_compiled, before.launches_compiled) << "dim " << dim;
    EXPECT_EQ(after.launches_interpreted, before.launches_interpreted) << "dim " << dim;
  }
  EXPECT_EQ(later.stats().codegen_count, 0u);
}

TEST_F(WarmStartTest, O1SitesInstallAndTheFirstCallRunsCompiled) {
  fillCache("O1");
  WarmStartResult result;
  const std::unique_ptr<Session> session = startWarm("O1", result);
  Session& later = *session;
  EXPECT_GT(result.installed, 0) << result.summary();
  EXPECT_EQ(result.codegens, 0u) << result.summary();
  for (const WarmStartEntry& entry : result.entries) EXPECT_EQ(entry.kind, "site");
  ASSERT_TRUE(matchesO0(later, 1, 21));
  EXPECT_GT(later.stats().launches_compiled, 0u);
  EXPECT_EQ(later.stats().codegen_count, 0u);
}

TEST_F(WarmStartTest, ACorruptedCacheEntryIsRejectedAndResultsStayRight) {
  fillCache("O2");
  // Bytes flipped in the middle of every cached kernel: each fails its checksum, is ignored with a
  // warning and compiled afresh (then validated), so the warm start runs codegen.
  const std::vector<fs::path> files = kernelFiles();
  ASSERT_FALSE(files.empty());
  for (const fs::path& file : files) {
    std::fstream data(file, std::ios::in | std::ios::out | std::ios::binary);
    const auto middle = static_cast<std::streamoff>(fs::file_size(file) / 2);
    data.seekg(middle);
    char byte = 0;
    data.read(&byte, 1);
    byte = static_cast<char>(byte ^ 0x5a);
    data.seekp(middle);
    data.write(&byte, 1);
  }
  WarmStartResult result;
  const std::unique_ptr<Session> session = startWarm("O2", result);
  Session& later = *session;
  EXPECT_GT(result.codegens, 0u) << "a corrupted entry was used: " << result.summary();
  ASSERT_TRUE(matchesO0(later, 3, 31));
}

TEST_F(WarmStartTest, AKernelThatFailsValidationIsNotInstalledAndResultsStayRight) {
  fillCache("O1");
  // Every kernel's outputs corrupted after codegen (a cached kernel's too): validation must catch
  // each one, so nothing is installed and the calls run the reference kernels.
  ASSERT_TRUE(Session::setTunable("JitTestCorruptKernels", "1").isOk());
  WarmStartResult result;
  const std::unique_ptr<Session> session = startWarm("O1", result);
  Session& later = *session;
  EXPECT_EQ(result.installed, 0) << result.summary();
  EXPECT_GT(result.failed, 0) << result.summary();
  for (const WarmStartEntry& entry : result.entries) {
    if (entry.outcome == "failed") {
      EXPECT_NE(entry.reason.find("validation"), std::string::npos) << entry.reason;
    }
  }
  ASSERT_TRUE(matchesO0(later, 2, 41));
}

TEST_F(WarmStartTest, AnEmptyCacheIsANoOpWithANote) {
  WarmStartResult result;
  const std::unique_ptr<Session> session = startWarm("O2", result);
  Session& later = *session;
  EXPECT_EQ(result.installed, 0);
  EXPECT_TRUE(result.entries.empty());
  EXPECT_NE(result.note.find("no install record"), std::string::npos) << result.note;
  EXPECT_NE(result.summary().find("no install record"), std::string::npos);
  ASSERT_TRUE(matchesO0(later, 2, 51));
}

TEST_F(WarmStartTest, AnotherProgramsRecordIsNotUsed) {
  fillCache("O2");
  Session other(options());
  ASSERT_TRUE(other.set("jit_level", "O2").isOk());
  LoadOptions load;
  load.filename = "axpy.py";
  ASSERT_TRUE(other.loadSource(kAxpy, load).isOk());
  auto warm = other.warmStart();
  ASSERT_TRUE(warm.hasValue()) << warm.status().toString();
  EXPECT_EQ(warm->installed, 0);
  EXPECT_TRUE(warm->entries.empty());
  EXPECT_NE(warm->note.find("no install record"), std::string::npos) << warm->note;
  EXPECT_EQ(other.stats().kernels_installed, 0u);
}

TEST_F(WarmStartTest, ACancelledWarmStartInstallsNothingAndTierUpStillWorks) {
  fillCache("O2");
  std::atomic<bool> cancel{true};
  WarmStartOptions warm_options;
  warm_options.cancel = &cancel;
  WarmStartResult result;
  const std::unique_ptr<Session> session = startWarm("O2", result, warm_options, true);
  Session& later = *session;
  EXPECT_TRUE(result.cancelled);
  EXPECT_EQ(result.installed, 0) << result.summary();
  EXPECT_FALSE(result.entries.empty());
  for (const WarmStartEntry& entry : result.entries) EXPECT_EQ(entry.outcome, "skipped") << entry.reason;
  EXPECT_EQ(later.stats().kernels_installed, 0u);
  // What was skipped is left to first sight: installed after the first call, results right.
  ASSERT_TRUE(matchesO0(later, 3, 61));
  EXPECT_GT(later.stats().kernels_installed, 0u);
}

TEST_F(WarmStartTest, O0OrNoProgramInstallNothing) {
  fillCache("O2");
  Session interpreted(options());
  EXPECT_FALSE(interpreted.warmStart().hasValue());  // no program loaded: the only error
  ASSERT_TRUE(interpreted.set("jit_level", "O0").isOk());
  ASSERT_TRUE(interpreted.load(kCell).isOk());
  auto warm = interpreted.warmStart();
  ASSERT_TRUE(warm.hasValue()) << warm.status().toString();
  EXPECT_EQ(warm->installed, 0);
  EXPECT_NE(warm->note.find("O0"), std::string::npos) << warm->note;
}

}  // namespace
}  // namespace shapevm
