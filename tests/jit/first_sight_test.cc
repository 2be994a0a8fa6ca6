// SPDX-License-Identifier: Apache-2.0
// Install records (jit/install_record.h): a session that compiled a program leaves a record in the
// kernel cache's directory, and the next session on the same program installs those sites (O1)
// and fused ranges (O2) on first sight, from the kernel cache with zero LLVM codegen, although its
// tunables (warm-up runs, hot_ms) would keep it interpreted for many more runs. A damaged or
// foreign record is ignored with a warning, a changed program or other shapes do not use the
// record, and `cache export/import/clear/stats` carry the records. Small shapes, two short
// sessions per test, in one process (the second session reads the record from disk).
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "bytecode/text_format.h"
#include "jit/install_record.h"
#include "jit/jit.h"
#include "jit/kernel_cache.h"
#include "jit_test_util.h"
#include "support/logging.h"
#include "support/tunables.h"
#include "vm/vm.h"

namespace shapevm::jit {
namespace {

namespace fs = std::filesystem;
using testing::kAddTanhProgram;
using testing::kDenseTanhProgram;
using testing::operand;

// The same program with sigmoid for tanh: other bytecode.
constexpr const char* kChangedProgram = R"(.module "sight"
.func f
  .param a : f32[?0,?1]
  .param b : f32[?0,?1]
  .outputs 1
  LoadTensor r0, a
  LoadTensor r1, b
  CallOp add r2 = r0, r1 : f32[?0,?1] x f32[?0,?1] -> f32[?0,?1]
  CallOp sigmoid r3 = r2 : f32[?0,?1] -> f32[?0,?1]
  StoreTensor r3, o0
  Return
.end
)";

std::mutex log_mutex;
std::vector<std::string> log_lines;
void captureLog(LogLevel, std::string_view, std::string_view message) {
  std::lock_guard<std::mutex> lock(log_mutex);
  log_lines.emplace_back(message);
}

class FirstSightTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Tunables::resetToDefaults();
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = (fs::temp_directory_path() / fmt::format("svm-sight-{}-{}", ::getpid(), info->name())).string();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    {
      std::lock_guard<std::mutex> lock(log_mutex);
      log_lines.clear();
    }
    Log::setSink(captureLog);
  }
  void TearDown() override {
    Log::setSink(nullptr);
    Tunables::resetToDefaults();
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }

  static bool logged(std::string_view text) {
    std::lock_guard<std::mutex> lock(log_mutex);
    for (const std::string& line : log_lines) {
      if (line.find(text) != std::string::npos) return true;
    }
    return false;
  }

  std::vector<std::string> records(const std::string& dir) const {
    std::vector<std::string> files;
    if (!fs::exists(dir + "/kernels")) return files;
    for (const auto& entry : fs::directory_iterator(dir + "/kernels")) {
      // Each record's operand layouts ("<identity>-layouts.svmi", kept for the warm start:
      // warm_start.cc) are not counted.
      const std::string name = entry.path().filename().string();
      if (entry.path().extension() == ".svmi" && !name.ends_with("-layouts.svmi"))
        files.push_back(entry.path().string());
    }
    return files;
  }

  // The outcome of one session: its JIT stats after each run, and whether every result matched.
  struct Session {
    std::vector<JitStats> after_run;
    bool correct = true;
  };

  // `runs` runs of `program` (eltwise: rows x cols operands; dense: rows rows) at `level` under a
  // JIT on `dir` that waits for its compiles after each run. `eager`: the first session's tunables
  // (compile after the first run, recompile after one guard miss); otherwise the defaults (3
  // warm-up runs, 20 ms hot).
  // `other_rows` > 0: every second run has that many rows instead.
  static Session run(const std::string& dir, const char* program, int level, int runs, bool eager, std::int64_t rows,
                     std::int64_t cols = 24, std::int64_t other_rows = 0) {
    Session session;
    Tunables::resetToDefaults();
    (void)Tunables::set(Tunable::JitLevel, level);
    (void)Tunables::set(Tunable::JitLog, 1);
    if (eager) {
      (void)Tunables::set(Tunable::HotMs, 0);
      (void)Tunables::set(Tunable::WarmupRuns, 0);
      (void)Tunables::set(Tunable::HotCount, 1);
      (void)Tunables::set(Tunable::GuardMissRecompile, 1);
    }
    auto module = assemble(program, "sight.svasm");
    EXPECT_TRUE(module.hasValue()) << module.status().toString();
    if (!module) return session;
    VirtualMachine vm(std::make_shared<Module>(std::move(*module)));
    JitOptions options;
    options.wait_for_compiles = true;
    options.kernel_cache_dir = dir;
    auto jit = Jit::attach(vm, options);
    EXPECT_TRUE(jit.hasValue()) << jit.status().toString();
    if (!jit) return session;
    const bool dense = std::string_view(program).find("matmul") != std::string_view::npos;
    const bool sigmoid = std::string_view(program).find("sigmoid") != std::string_view::npos;
    std::mt19937 rng(11);
    for (int r = 0; r < runs; ++r) {
      const std::int64_t n = other_rows > 0 && r % 2 == 1 ? other_rows : rows;
      std::vector<Value> args;
      Value want;
      if (dense) {
        args = {operand(DType::Float32, Shape{n, 32}, rng), operand(DType::Float32, Shape{32, 48}, rng),
                operand(DType::Float32, Shape{48}, rng)};
        const Value product = callOp("matmul", {args[0], args[1]}).value()[0];
        want = callOp("tanh", {callOp("add", {product, args[2]}).value()[0]}).value()[0];
      } else {
        args = {operand(DType::Float32, Shape{n, cols}, rng), operand(DType::Float32, Shape{n, cols}, rng)};
        want = callOp(sigmoid ? "sigmoid" : "tanh", {callOp("add", {args[0], args[1]}).value()[0]}).value()[0];
      }
      auto out = vm.run(0, args);
      EXPECT_TRUE(out.hasValue()) << out.status().toString();
      if (!out) return session;
      for (std::int64_t i = 0; i < want.tensor().numel(); ++i) {
        if (std::abs(want.tensor().elementAsDouble(i) - (*out)[0].tensor().elementAsDouble(i)) > 1e-5) {
          session.correct = false;
        }
      }
      session.after_run.push_back((*jit)->stats());
    }
    return session;
  }

  std::string dir_;
};

TEST_F(FirstSightTest, ASecondSessionInstallsTheRecordedO1SitesOnItsFirstRun) {
  const Session first = run(dir_, kAddTanhProgram, 1, 2, /*eager=*/true, 6);
  ASSERT_TRUE(first.correct);
  ASSERT_EQ(first.after_run.back().compiles, 2u);
  EXPECT_EQ(first.after_run.back().first_sight_installs, 0u);
  ASSERT_EQ(records(dir_).size(), 1u) << "one record for the function";

  // Default tunables: without the record nothing would compile within these runs (3 warm-up runs,
  // then 20 ms of hot time on 6x24 operands).
  const Session second = run(dir_, kAddTanhProgram, 1, 2, /*eager=*/false, 6);
  EXPECT_TRUE(second.correct);
  ASSERT_EQ(second.after_run.size(), 2u);
  const JitStats& after_first = second.after_run[0];
  EXPECT_EQ(after_first.first_sight_installs, 2u);
  EXPECT_EQ(after_first.compiles, 2u);
  EXPECT_EQ(after_first.codegen_count, 0u) << "both kernels came from the kernel cache";
  EXPECT_EQ(after_first.kernels_from_cache, 2u);
  EXPECT_EQ(after_first.compiled_calls, 0u) << "the first run itself was interpreted";
  EXPECT_EQ(second.after_run[1].compiled_calls, 2u) << "the second run launched both kernels";
  EXPECT_TRUE(logged("installed from the cache on first sight"));
}

TEST_F(FirstSightTest, ASecondSessionInstallsTheRecordedO2RegionOnItsFirstRun) {
  // The first session meets 8 and 17 rows: its region ends up compiled for both.
  const Session first = run(dir_, kDenseTanhProgram, 2, 4, /*eager=*/true, 8, 24, 17);
  ASSERT_TRUE(first.correct);
  ASSERT_GE(first.after_run.back().fused_regions, 1u);
  ASSERT_EQ(records(dir_).size(), 1u);

  const Session second = run(dir_, kDenseTanhProgram, 2, 3, /*eager=*/false, 8, 24, 17);
  EXPECT_TRUE(second.correct);
  ASSERT_EQ(second.after_run.size(), 3u);
  EXPECT_EQ(second.after_run[0].first_sight_installs, 1u);
  EXPECT_EQ(second.after_run[0].fused_regions, 1u);
  EXPECT_EQ(second.after_run[0].codegen_count, 0u) << "the region's kernels came from the kernel cache";
  EXPECT_EQ(second.after_run[0].region_runs, 0u);
  // Planned with the shapes the first session met, the region serves 17 rows as well as 8.
  EXPECT_EQ(second.after_run[2].region_runs, 2u) << "the second and third runs ran the fused region";
  EXPECT_EQ(second.after_run[2].region_declines, 0u);
  EXPECT_EQ(second.after_run[2].codegen_count, 0u);
  EXPECT_TRUE(logged("installed from the cache on first sight"));
}

// The kept planning runs (<identity>-r<range>.svmv) in `dir`'s kernel cache.
std::vector<std::string> keptRuns(const std::string& dir) {
  std::vector<std::string> files;
  if (!fs::exists(dir + "/kernels")) return files;
  for (const auto& entry : fs::directory_iterator(dir + "/kernels")) {
    if (entry.path().extension() == ".svmv") files.push_back(entry.path().string());
  }
  return files;
}

std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void writeFile(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

void clearLog() {
  std::lock_guard<std::mutex> lock(log_mutex);
  log_lines.clear();
}

TEST_F(FirstSightTest, ALaterSessionReplaysTheKeptPlanningRunAndStillValidates) {
  ASSERT_TRUE(run(dir_, kDenseTanhProgram, 2, 4, /*eager=*/true, 8, 24, 17).correct);
  EXPECT_TRUE(keptRuns(dir_).empty()) << "a first-sight install keeps its planning run, not a usual compile";
  // The second session installs on first sight, running the reference, and keeps that run.
  const Session second = run(dir_, kDenseTanhProgram, 2, 3, /*eager=*/false, 8, 24, 17);
  ASSERT_TRUE(second.correct);
  ASSERT_EQ(second.after_run[0].first_sight_installs, 1u);
  EXPECT_TRUE(logged("planning run run)"));
  const std::vector<std::string> kept = keptRuns(dir_);
  ASSERT_EQ(kept.size(), 1u);

  // The third replays it: same install, same results, no reference run.
  clearLog();
  const Session third = run(dir_, kDenseTanhProgram, 2, 3, /*eager=*/false, 8, 24, 17);
  EXPECT_TRUE(third.correct);
  ASSERT_EQ(third.after_run.size(), 3u);
  EXPECT_EQ(third.after_run[0].first_sight_installs, 1u);
  EXPECT_EQ(third.after_run[0].validation_failures, 0u);
  EXPECT_EQ(third.after_run[0].codegen_count, 0u);
  EXPECT_EQ(third.after_run[2].region_runs, 2u);
  EXPECT_TRUE(logged("planning run kept by an earlier process"));

  // Validation compares with the kept values: a kept run whose written-back contents are wrong
  // (checksum made to match) makes the region disagree, and nothing wrong is installed.
  const std::string good = readFile(kept[0]);
  std::string wrong = good.substr(0, good.size() - 8);
  for (std::size_t k = wrong.size() - 64; k < wrong.size(); ++k) wrong[k] = static_cast<char>(wrong[k] ^ 0x40);
  const std::uint64_t sum = ReferenceRunStore::checksum(wrong);
  wrong.append(reinterpret_cast<const char*>(&sum), sizeof sum);
  writeFile(kept[0], wrong);
  clearLog();
  const Session misled = run(dir_, kDenseTanhProgram, 2, 3, /*eager=*/false, 8, 24, 17);
  EXPECT_TRUE(misled.correct);
  EXPECT_EQ(misled.after_run[0].validation_failures, 1u);
  EXPECT_EQ(misled.after_run[0].fused_regions, 0u);
  EXPECT_TRUE(logged("disagrees"));

  // A damaged file (one byte flipped, or cut short) is ignored with a warning: the reference runs.
  for (const std::string& damaged : {good.substr(0, good.size() / 2), std::string(good).replace(20, 1, "\x7f")}) {
    writeFile(kept[0], damaged);
    clearLog();
    const Session after = run(dir_, kDenseTanhProgram, 2, 2, /*eager=*/false, 8, 24, 17);
    EXPECT_TRUE(after.correct);
    EXPECT_EQ(after.after_run[0].first_sight_installs, 1u);
    EXPECT_EQ(after.after_run[0].validation_failures, 0u);
    EXPECT_TRUE(logged("ignoring the kept reference run"));
    EXPECT_TRUE(logged("planning run run)"));
  }
}

TEST_F(FirstSightTest, DamagedOrForeignRecordsAreIgnoredWithAWarning) {
  ASSERT_TRUE(run(dir_, kAddTanhProgram, 1, 1, /*eager=*/true, 6).correct);
  const std::vector<std::string> files = records(dir_);
  ASSERT_EQ(files.size(), 1u);
  std::string text;
  {
    std::ifstream in(files[0], std::ios::binary);
    text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  ASSERT_TRUE(InstallRecord::decode(text).hasValue());
  const std::size_t site = text.find("site ");
  ASSERT_NE(site, std::string::npos);
  std::string flipped = text;
  flipped[site + 5] = flipped[site + 5] == '1' ? '2' : '1';  // another site index, checksum unchanged
  std::string foreign = text;
  const std::size_t identity = foreign.find("identity ") + 9;
  foreign[identity] = foreign[identity] == '0' ? '1' : '0';
  // Re-checksummed so that only the identity is wrong.
  Expected<InstallRecord> other = InstallRecord::decode(text);
  other->identity = foreign.substr(identity, 16);
  foreign = other->encode();
  const std::vector<std::pair<std::string, std::string>> damaged = {
      {"flipped", flipped}, {"truncated", text.substr(0, text.size() / 2)}, {"foreign", foreign}, {"empty", ""}};
  for (const auto& [what, bytes] : damaged) {
    SCOPED_TRACE(what);
    { std::ofstream(files[0], std::ios::binary | std::ios::trunc) << bytes; }
    {
      std::lock_guard<std::mutex> lock(log_mutex);
      log_lines.clear();
    }
    const Session second = run(dir_, kAddTanhProgram, 1, 2, /*eager=*/false, 6);
    EXPECT_TRUE(second.correct);
    ASSERT_EQ(second.after_run.size(), 2u);
    EXPECT_EQ(second.after_run.back().first_sight_installs, 0u);
    EXPECT_EQ(second.after_run.back().compiles, 0u) << "the usual path: still warming up";
    EXPECT_TRUE(logged("ignoring install record")) << "a warning names the ignored record";
  }
}

TEST_F(FirstSightTest, AChangedProgramOrOtherShapesDoNotUseTheRecord) {
  ASSERT_TRUE(run(dir_, kAddTanhProgram, 1, 1, /*eager=*/true, 6).correct);
  ASSERT_EQ(records(dir_).size(), 1u);
  const Session changed = run(dir_, kChangedProgram, 1, 2, /*eager=*/false, 6);
  EXPECT_TRUE(changed.correct);
  EXPECT_EQ(changed.after_run.back().first_sight_installs, 0u);
  EXPECT_EQ(changed.after_run.back().requests, 0u);
  const Session reshaped = run(dir_, kAddTanhProgram, 1, 2, /*eager=*/false, 5, 40);
  EXPECT_TRUE(reshaped.correct);
  EXPECT_EQ(reshaped.after_run.back().first_sight_installs, 0u) << "shapes the record does not list";
  EXPECT_EQ(reshaped.after_run.back().requests, 0u);
  // O2 keeps records of its own: an O1 record is not used there.
  const Session o2 = run(dir_, kAddTanhProgram, 2, 2, /*eager=*/false, 6);
  EXPECT_TRUE(o2.correct);
  EXPECT_EQ(o2.after_run.back().first_sight_installs, 0u);
}

TEST_F(FirstSightTest, CacheExportImportClearAndStatsCarryTheRecords) {
  ASSERT_TRUE(run(dir_ + "/warm", kAddTanhProgram, 1, 1, /*eager=*/true, 6).correct);
  KernelCache warm(dir_ + "/warm");
  EXPECT_EQ(warm.stats().install_records, 1u);
  EXPECT_EQ(warm.stats().layout_records, 1u);  // the record's operand layouts (warm_start.cc)
  ASSERT_TRUE(warm.exportTo(dir_ + "/shipped/kernels").hasValue());
  EXPECT_EQ(records(dir_ + "/shipped").size(), 1u);
  // A damaged record in the shipment is not imported.
  { std::ofstream(dir_ + "/shipped/kernels/0123456789abcdef.svmi") << "garbage"; }
  KernelCache replica(dir_ + "/replica");
  ASSERT_TRUE(replica.importFrom(dir_ + "/shipped/kernels").hasValue());
  EXPECT_EQ(replica.stats().install_records, 1u);
  EXPECT_EQ(replica.stats().layout_records, 1u);  // the layouts travel too
  const Session second = run(dir_ + "/replica", kAddTanhProgram, 1, 2, /*eager=*/false, 6);
  EXPECT_TRUE(second.correct);
  EXPECT_EQ(second.after_run[0].first_sight_installs, 2u);
  EXPECT_EQ(second.after_run[0].codegen_count, 0u);
  ASSERT_TRUE(replica.clear().isOk());
  EXPECT_EQ(replica.stats().install_records, 0u);
  EXPECT_EQ(replica.stats().layout_records, 0u);
  EXPECT_TRUE(records(dir_ + "/replica").empty());
}

TEST(InstallRecord, EncodesDecodesMergesAndRejectsDamage) {
  InstallRecord record;
  record.identity = "0123456789abcdef";
  record.sites[3] = {3, false, {{"f32(6,24) x f32(6,24)"}}};
  record.ranges[0] = {1, true, {{"f32(8,32) x f32(32,48)"}, {"f32(8,48) x f32(48)", "f32(9,48) x f32(48)"}}};
  const std::string text = record.encode();
  Expected<InstallRecord> back = InstallRecord::decode(text);
  ASSERT_TRUE(back.hasValue()) << back.status().toString();
  EXPECT_EQ(back->encode(), text);
  EXPECT_TRUE(back->ranges.at(0).tuned);
  EXPECT_EQ(back->ranges.at(0).sigs[1].size(), 2u);
  InstallRecord more;
  more.identity = record.identity;
  more.sites[3] = {3, false, {{"f32(7,24) x f32(7,24)"}}};
  more.sites[5] = {5, false, {{"f32(1)"}}};
  back->merge(more);
  EXPECT_EQ(back->sites.at(3).sigs[0].size(), 2u);
  EXPECT_EQ(back->sites.size(), 2u);
  EXPECT_FALSE(InstallRecord::decode(text.substr(0, text.size() - 3)).hasValue());
  EXPECT_FALSE(InstallRecord::decode("").hasValue());
  std::string edited = text;
  edited[edited.find("f32(6")] = 'i';
  EXPECT_FALSE(InstallRecord::decode(edited).hasValue());
}

}  // namespace
}  // namespace shapevm::jit
