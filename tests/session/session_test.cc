// SPDX-License-Identifier: Apache-2.0
// The public Session API (include/shapevm/shapevm.h): loading .py/.svasm files and source text,
// function and parameter listings, runs with tensors and scalars, O0 vs O2 on fresh random inputs
// over several shapes, settings (per-Session jit_level, process-wide rows, bad keys and values),
// the errors for a missing function and wrong argument counts, kinds and shapes, statistics that
// move, save() round trips, and a Session destroyed while its compiles or its tuning are in flight
// (promptly, leaving only whole tuning-database records).
#include "shapevm/shapevm.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <sstream>
#include <string>
#include <thread>

#include "session_inputs.h"
#include "support/tunables.h"

namespace shapevm {
namespace {

const std::string kExamples = std::string(SHAPEVM_SOURCE_DIR) + "/examples";

constexpr const char* kAxpy = R"(from shapevm import ops, Tensor


def axpy(x: Tensor["n", 4], y: Tensor["n", 4], a: float):
    return x * a + y
)";

constexpr const char* kSvasm = R"(.module "twice"
.func twice
  .param a : f32[?0]
  .outputs 1
  LoadTensor r0, a
  CallOp add r1 = r0, r0 : f32[?0] x f32[?0] -> f32[?0]
  StoreTensor r1, o0
  Return
.end
)";

class SessionTest : public ::testing::Test {
 protected:
  void SetUp() override { Tunables::resetToDefaults(); }
  void TearDown() override { Tunables::resetToDefaults(); }

  // No tuning database is read or written by a test.
  static SessionOptions quiet() {
    SessionOptions options;
    options.tuning_cache = false;
    options.tune_budget_ms = 50;
    return options;
  }
  // Regions are hot at once and each run waits for its compiles.
  static void hotAtOnce() {
    for (const char* key : {"hot_count", "hot_ms", "warmup"}) ASSERT_TRUE(Session::setTunable(key, "0").isOk());
  }
};

using testing_inputs::randomArgs;
using testing_inputs::randomTensor;
using testing_inputs::relL2;

TEST_F(SessionTest, RunsPythonSourceText) {
  Session session(quiet());
  LoadOptions load;
  load.filename = "axpy.py";
  ASSERT_TRUE(session.loadSource(kAxpy, load).isOk());
  EXPECT_TRUE(session.loaded());
  std::mt19937_64 rng(1);
  Tensor x = randomTensor(Shape{3, 4}, rng), y = randomTensor(Shape{3, 4}, rng);
  const std::vector<Value> args = {Value::fromTensor(x), Value::fromTensor(y), Value::fromFloat(2.5)};
  auto out = session.run("axpy", args);
  ASSERT_TRUE(out.hasValue()) << out.status().toString();
  ASSERT_EQ(out->size(), 1u);
  const Tensor& z = (*out)[0].tensor();
  ASSERT_EQ(z.shape(), (Shape{3, 4}));
  for (std::int64_t i = 0; i < 12; ++i) {
    EXPECT_FLOAT_EQ(z.data<float>()[i], x.data<float>()[i] * 2.5f + y.data<float>()[i]) << i;
  }
}

TEST_F(SessionTest, ListsFunctionsWithParameterNamesAndTokens) {
  for (const std::string file : {"lstm_cell.py", "lstm_cell.svasm"}) {
    Session session(quiet());
    ASSERT_TRUE(session.load(kExamples + "/" + file).isOk()) << file;
    const std::vector<FunctionInfo> functions = session.functions();
    ASSERT_EQ(functions.size(), 1u) << file;
    const FunctionInfo& fn = functions[0];
    EXPECT_EQ(fn.name, "lstm_cell");
    EXPECT_EQ(fn.num_outputs, 2);
    ASSERT_EQ(fn.params.size(), 7u);
    EXPECT_EQ(fn.params[0].name, "x");
    // The .py annotations leave the dtype open; the .svasm tokens say f32.
    const bool python = file.ends_with(".py");
    EXPECT_EQ(fn.params[0].token, python ? "[?0,?1,128]" : "f32[?0,?1,128]");
    EXPECT_EQ(fn.params[0].dtype, python ? std::nullopt : std::optional<DType>(DType::Float32));
    EXPECT_EQ(fn.params[0].kind, ValueKind::Tensor);
    ASSERT_EQ(fn.params[0].dims.size(), 3u);
    EXPECT_EQ(fn.params[0].dims[0].name, "batch");
    EXPECT_EQ(fn.params[0].dims[0].size, -1);
    EXPECT_EQ(fn.params[0].dims[1].name, "seq");
    EXPECT_EQ(fn.params[0].dims[2].size, 128);
    EXPECT_EQ(fn.params[3].name, "W_ih");
    EXPECT_EQ(fn.params[3].token, python ? "[1024,128]" : "f32[1024,128]");
    auto by_name = session.function("");
    ASSERT_TRUE(by_name.hasValue()) << by_name.status().toString();
    EXPECT_EQ(by_name->index, 0);
  }
}

TEST_F(SessionTest, LoadsSvasmTextAndRoundTripsThroughSave) {
  Session session(quiet());
  ASSERT_TRUE(session.loadSource(kSvasm).isOk());  // detected by its `.module` line
  const std::string path =
      (std::filesystem::temp_directory_path() / ("svm_session_" + std::to_string(::getpid()) + ".svasm")).string();
  ASSERT_TRUE(session.save(path).isOk());
  Session again(quiet());
  ASSERT_TRUE(again.load(path).isOk());
  std::filesystem::remove(path);
  Tensor a = std::move(Tensor::empty(DType::Float32, Shape{3}).value());
  for (int i = 0; i < 3; ++i) a.data<float>()[i] = static_cast<float>(i) + 0.5f;
  auto out = again.run("twice", std::vector<Value>{Value::fromTensor(a)});
  ASSERT_TRUE(out.hasValue()) << out.status().toString();
  EXPECT_FLOAT_EQ((*out)[0].tensor().data<float>()[2], 5.0f);
}

TEST_F(SessionTest, LoadErrorsNameTheFileAndLine) {
  Session session(quiet());
  Status missing = session.load("/nonexistent/prog.py");
  EXPECT_EQ(missing.code(), ErrorCode::IoError);
  EXPECT_NE(missing.message().find("/nonexistent/prog.py"), std::string::npos) << missing.toString();
  LoadOptions load;
  load.filename = "broken.py";
  Status broken = session.loadSource("def f(x: Tensor[4]):\n    return ops.no_such_op(x)\n", load);
  EXPECT_FALSE(broken.isOk());
  EXPECT_NE(broken.message().find("broken.py"), std::string::npos) << broken.toString();
  EXPECT_NE(broken.message().find("line 2"), std::string::npos) << broken.toString();
  EXPECT_FALSE(session.loaded());
  auto ran = session.run("f", {});
  EXPECT_FALSE(ran.hasValue());
  EXPECT_NE(ran.status().message().find("no program is loaded"), std::string::npos) << ran.status().toString();
  Status options = session.loadSource(kAxpy, [] {
    LoadOptions o;
    o.optimizations = "dce,bogus";
    return o;
  }());
  EXPECT_NE(options.message().find("bogus"), std::string::npos) << options.toString();
}

TEST_F(SessionTest, O2MatchesO0OnFreshRandomInputsAcrossShapes) {
  if (!Session::jitAvailable()) GTEST_SKIP() << "built without the JIT";
  hotAtOnce();
  SessionOptions options = quiet();
  options.jit_wait = true;
  Session fast(options), reference(options);
  ASSERT_TRUE(fast.set("jit_level", "O2").isOk());
  ASSERT_TRUE(reference.set("jit_level", "O0").isOk());
  ASSERT_TRUE(fast.load(kExamples + "/lstm_cell.py").isOk());
  ASSERT_TRUE(reference.load(kExamples + "/lstm_cell.py").isOk());
  ASSERT_TRUE(fast.jitStatus().isOk()) << fast.jitStatus().toString();
  const FunctionInfo fn = fast.functions()[0];
  std::mt19937_64 rng(5);
  for (std::int64_t dim : {2, 5, 3, 9, 2, 5, 3, 9}) {
    const std::vector<Value> args = randomArgs(fn, dim, rng);
    auto got = fast.run(fn.index, args);
    auto want = reference.run(fn.index, args);
    ASSERT_TRUE(got.hasValue()) << got.status().toString();
    ASSERT_TRUE(want.hasValue()) << want.status().toString();
    ASSERT_EQ(got->size(), 2u);
    for (std::size_t i = 0; i < got->size(); ++i) {
      ASSERT_EQ((*got)[i].tensor().shape(), (*want)[i].tensor().shape());
      EXPECT_LE(relL2((*got)[i].tensor(), (*want)[i].tensor()), 1e-5) << "dim " << dim << " output " << i;
    }
  }
  const SessionStats o2 = fast.stats(), o0 = reference.stats();
  EXPECT_EQ(o2.runs, 8u);
  EXPECT_EQ(o2.jit_level, 2);
  EXPECT_GT(o2.kernels_installed, 0u);
  EXPECT_GT(o2.launches_compiled, 0u);
  EXPECT_GT(o2.compile_ms, 0.0);
  EXPECT_NE(o2.jit_report.find("jit: level O2"), std::string::npos) << o2.jit_report;
  EXPECT_EQ(o0.jit_level, 0);
  EXPECT_EQ(o0.launches_compiled, 0u);
  EXPECT_EQ(o0.kernels_installed, 0u);
  EXPECT_TRUE(o0.jit_report.empty());
}

TEST_F(SessionTest, StatsCountRunsLaunchesAndAllocations) {
  Session session(quiet());
  ASSERT_TRUE(session.set("jit_level", 0).isOk());
  EXPECT_EQ(session.stats().runs, 0u);
  ASSERT_TRUE(session.loadSource(kAxpy).isOk());
  std::mt19937_64 rng(2);
  const std::vector<Value> args = {Value::fromTensor(randomTensor(Shape{5, 4}, rng)),
                                   Value::fromTensor(randomTensor(Shape{5, 4}, rng)), Value::fromFloat(1.0)};
  ASSERT_TRUE(session.run("axpy", args).hasValue());
  const SessionStats first = session.stats();
  ASSERT_TRUE(session.run("axpy", args).hasValue());
  ASSERT_TRUE(session.run("axpy", args).hasValue());
  const SessionStats third = session.stats();
  EXPECT_EQ(first.runs, 1u);
  EXPECT_EQ(third.runs, 3u);
  EXPECT_GE(first.launches_interpreted, 2u);  // mul, add
  EXPECT_EQ(third.launches_interpreted, 3 * first.launches_interpreted);
  EXPECT_GT(third.allocations_requested, first.allocations_requested);
  EXPECT_GE(third.allocations_requested, third.allocations_system);
  EXPECT_GT(third.instructions, first.instructions);
}

TEST_F(SessionTest, JitLevelIsPerSessionOtherSettingsAreProcessWide) {
  Session a(quiet()), b(quiet());
  ASSERT_TRUE(a.set("hot_count", 7).isOk());
  EXPECT_EQ(*b.get("hot_count"), 7);
  EXPECT_EQ(*Session::getTunable("HotCount"), 7);  // the CamelCase name works too
  ASSERT_TRUE(a.set("hot_ms", "33").isOk());
  EXPECT_EQ(Tunables::get(Tunable::HotMs), 33);

  const std::int64_t start = *b.get("jit_level");
  ASSERT_TRUE(a.set("jit_level", "O0").isOk());
  EXPECT_EQ(*a.get("jit_level"), 0);
  EXPECT_EQ(*b.get("jit_level"), start);
  // The table's row (where new Sessions start; interpreter-only builds start at O0) is untouched.
  EXPECT_EQ(*Session::getTunable("jit_level"), Tunables::info(Tunable::JitLevel).default_value);
  EXPECT_EQ(start, Session::jitAvailable() ? Tunables::info(Tunable::JitLevel).default_value : 0);
  bool listed = false;
  for (const Session::Setting& s : a.settings()) {
    if (s.key == "jit_level") {
      listed = true;
      EXPECT_EQ(s.value, 0);
      EXPECT_EQ(s.default_value, 2);
      EXPECT_EQ(s.env, "SHAPEVM_JIT_LEVEL");
    }
  }
  EXPECT_TRUE(listed);
  if (Session::jitAvailable()) {
    ASSERT_TRUE(Session::setTunable("jit_level", "1").isOk());
    Session c(quiet());
    EXPECT_EQ(*c.get("jit_level"), 1);
  } else {
    Status refused = a.set("jit_level", "O2");
    EXPECT_EQ(refused.code(), ErrorCode::Unsupported);
    EXPECT_NE(refused.message().find("SHAPEVM_ENABLE_JIT=OFF"), std::string::npos) << refused.toString();
  }
}

TEST_F(SessionTest, BadSettingNamesAndValuesAreClearErrors) {
  Session session(quiet());
  Status unknown = session.set("no_such_knob", 1);
  EXPECT_EQ(unknown.code(), ErrorCode::UnknownName);
  EXPECT_NE(unknown.message().find("unknown tunable 'no_such_knob'"), std::string::npos) << unknown.toString();
  EXPECT_NE(unknown.message().find("hot_count"), std::string::npos) << unknown.toString();  // lists the known ones
  EXPECT_FALSE(session.get("no_such_knob").hasValue());
  Status not_int = session.set("hot_count", "lots");
  EXPECT_EQ(not_int.code(), ErrorCode::InvalidArgument);
  EXPECT_NE(not_int.message().find("hot_count"), std::string::npos) << not_int.toString();
  Status range = session.set("kernel_threads", -1);
  EXPECT_NE(range.message().find("outside its range"), std::string::npos) << range.toString();
  Status level = session.set("jit_level", "O7");
  EXPECT_EQ(level.code(), ErrorCode::InvalidArgument);
  EXPECT_NE(level.message().find("jit_level"), std::string::npos) << level.toString();
  Status word = session.set("jit_level", "fast");
  EXPECT_NE(word.message().find("'fast' is not a level"), std::string::npos) << word.toString();
  EXPECT_EQ(Tunables::get(Tunable::HotCount), Tunables::info(Tunable::HotCount).default_value);  // nothing changed
}

TEST_F(SessionTest, MissingFunctionAndWrongArgumentsAreClearErrors) {
  Session session(quiet());
  ASSERT_TRUE(session.loadSource(kAxpy).isOk());
  std::mt19937_64 rng(3);
  Tensor x = randomTensor(Shape{3, 4}, rng);

  auto missing = session.run("nope", std::vector<Value>{});
  EXPECT_EQ(missing.status().code(), ErrorCode::UnknownName);
  EXPECT_NE(missing.status().message().find("no function 'nope'"), std::string::npos) << missing.status().toString();
  EXPECT_NE(missing.status().message().find("axpy"), std::string::npos) << missing.status().toString();
  EXPECT_FALSE(session.function("nope").hasValue());
  EXPECT_FALSE(session.run(5, std::vector<Value>{}).hasValue());

  auto count = session.run("axpy", std::vector<Value>{Value::fromTensor(x)});
  EXPECT_EQ(count.status().code(), ErrorCode::InvalidArgument);
  EXPECT_NE(count.status().message().find("takes 3 arguments (x, y, a), got 1"), std::string::npos)
      << count.status().toString();

  Tensor wrong = randomTensor(Shape{3, 5}, rng);
  auto shape =
      session.run("axpy", std::vector<Value>{Value::fromTensor(x), Value::fromTensor(wrong), Value::fromFloat(1)});
  EXPECT_FALSE(shape.hasValue());
  EXPECT_NE(shape.status().message().find("parameter 'y'"), std::string::npos) << shape.status().toString();
  EXPECT_NE(shape.status().message().find("[3,5]"), std::string::npos) << shape.status().toString();

  auto kind = session.run("axpy", std::vector<Value>{Value::fromInt(1), Value::fromTensor(x), Value::fromFloat(1)});
  EXPECT_EQ(kind.status().code(), ErrorCode::KindMismatch);
  EXPECT_NE(kind.status().message().find("parameter 'x' must be a tensor"), std::string::npos)
      << kind.status().toString();
  // The session stays usable after errors.
  auto fine = session.run("axpy", std::vector<Value>{Value::fromTensor(x), Value::fromTensor(x), Value::fromFloat(1)});
  EXPECT_TRUE(fine.hasValue()) << fine.status().toString();
}

TEST_F(SessionTest, JitLevelChangeReattachesAndCompiles) {
  if (!Session::jitAvailable()) GTEST_SKIP() << "built without the JIT";
  hotAtOnce();
  SessionOptions options = quiet();
  options.jit_wait = true;
  options.autotune = false;
  Session session(options);
  ASSERT_TRUE(session.set("jit_level", 0).isOk());
  ASSERT_TRUE(session.loadSource(kAxpy).isOk());
  std::mt19937_64 rng(4);
  const FunctionInfo fn = session.functions()[0];
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(session.run(fn.index, randomArgs(fn, 6, rng)).hasValue());
  EXPECT_EQ(session.stats().kernels_installed, 0u);
  ASSERT_TRUE(session.set("jit_level", "O1").isOk());
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(session.run(fn.index, randomArgs(fn, 6, rng)).hasValue());
  session.waitIdle();
  const SessionStats st = session.stats();
  EXPECT_EQ(st.jit_level, 1);
  EXPECT_GT(st.kernels_installed, 0u);
  EXPECT_GT(st.launches_compiled, 0u);
}

TEST_F(SessionTest, DestroyedWhileCompilesAreInFlight) {
  if (!Session::jitAvailable()) GTEST_SKIP() << "built without the JIT";
  hotAtOnce();
  ASSERT_TRUE(Session::setTunable("jit_test_compile_delay_ms", "300").isOk());
  std::mt19937_64 rng(6);
  for (int round = 0; round < 2; ++round) {
    auto session = std::make_unique<Session>(quiet());
    ASSERT_TRUE(session->set("jit_level", 1 + round).isOk());
    ASSERT_TRUE(session->loadSource(kAxpy).isOk());
    const FunctionInfo fn = session->functions()[0];
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(session->run(fn.index, randomArgs(fn, 4, rng)).hasValue());
    const SessionStats st = session->stats();
    unsigned level = 0;
    unsigned long long requests = 0;
    ASSERT_EQ(std::sscanf(st.jit_report.c_str(), "jit: level O%u, %llu compile requests", &level, &requests), 2)
        << st.jit_report;
    EXPECT_GT(requests, 0u) << st.jit_report;
    EXPECT_EQ(st.kernels_installed, 0u);  // still sleeping
    session.reset();                      // a compile is sleeping in the compile thread: stopped, no crash
  }
}

TEST_F(SessionTest, DestroyedWhileTuningIsInFlightReturnsPromptlyAndLeavesNoPartialRecord) {
  if (!Session::jitAvailable()) GTEST_SKIP() << "built without the JIT";
  hotAtOnce();
  // Tuning at once (no pay-off wait), long: each candidate is timed for >= 9 x 50 ms.
  ASSERT_TRUE(Session::setTunable("tune_payoff", "0").isOk());
  ASSERT_TRUE(Session::setTunable("tune_sample_us", "50000").isOk());
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("svm_session_cancel_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  SessionOptions options = quiet();
  options.tuning_cache = true;
  options.tuning_db = (dir / "tuning.jsonl").string();
  options.tune_budget_ms = 600000;
  auto session = std::make_unique<Session>(options);
  ASSERT_TRUE(session->set("jit_level", "O2").isOk());
  ASSERT_TRUE(session->load(kExamples + "/lstm_cell.py").isOk());
  const FunctionInfo fn = session->functions()[0];
  std::mt19937_64 rng(8);
  // Run until the untuned region is installed and its tuning request has been taken.
  bool tuning = false;
  for (int i = 0; i < 2000 && !tuning; ++i) {
    ASSERT_TRUE(session->run(fn.index, randomArgs(fn, 4, rng)).hasValue());
    const SessionStats st = session->stats();
    unsigned level = 0;
    unsigned long long requests = 0;
    ASSERT_EQ(std::sscanf(st.jit_report.c_str(), "jit: level O%u, %llu compile requests", &level, &requests), 2);
    tuning = st.fused_regions > 0 && requests > st.kernels_installed;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ASSERT_TRUE(tuning) << session->stats().jit_report;
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // well inside the candidates' timing
  const auto start = std::chrono::steady_clock::now();
  session.reset();
  const double destroy_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  // Bounded by one kernel's LLVM compile at worst (the cancellation points are before every
  // compile, between candidates and inside timing loops), not by the tuning still to come (minutes).
  EXPECT_LT(destroy_ms, 3000) << "the Session waited for the tuning to finish";
  std::printf("[ INFO     ] Session destroyed %.1f ms after the cancel\n", destroy_ms);
  // Whatever the database holds is whole records of kernels that finished (one JSON object a line).
  std::ifstream in(dir / "tuning.jsonl");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_TRUE(text.empty() || text.back() == '\n') << text;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    EXPECT_TRUE(line.starts_with("{") && line.ends_with("}") && line.find("\"params\"") != std::string::npos) << line;
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace shapevm
