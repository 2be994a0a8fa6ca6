// SPDX-License-Identifier: Apache-2.0
// O2 region fusion, differential: every program runs on a plain VM (O0, the reference kernels op
// by op) and on a VM with an O2 Jit (zero thresholds, wait_for_compiles), several runs on fresh
// random inputs (never zeros; the base seed is printed on failure), and every output must agree
// within the dtype's tolerance (validate.h). Each test also checks the fusion really happened —
// a fused region installed and later executions served by it (the range's entry slot counts a
// compiled call per region execution) — so a planner that quietly declines everything fails.
// Patterns: broadcasting elementwise chains, matmul + bias + activation / residual epilogues,
// views (transpose, split, squeeze, unsqueeze; slices as strided region inputs) inside the
// chains, the LSTM cell and loop, multi-output ranges, liveness after a range, registers
// overwritten inside a loop's range, float32/float16/bfloat16, odd and dynamic sizes,
// non-contiguous inputs, and the decline path when an input's dtype or rank changes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include <unistd.h>

#include <fmt/format.h>

#include "../ops/op_test_util.h"
#include "bytecode/text_format.h"
#include "bytecode/verifier.h"
#include "frontend/frontend.h"
#include "jit/compiled_kernel.h"
#include "jit/fusion.h"
#include "jit/jit.h"
#include "jit/llvm_cpu/llvm_cpu_backend.h"
#include "jit/region_executor.h"
#include "jit/region_inputs.h"
#include "jit/shape_infer.h"
#include "jit/validate.h"
#include "support/cpu_cores.h"
#include "support/tunables.h"
#include "vm/vm.h"

namespace shapevm::jit {
namespace {

using shapevm::testing::Layout;

// One base seed per process (fresh inputs every time the suite runs), printed on failure.
std::uint32_t baseSeed() {
  static const std::uint32_t seed = std::random_device{}();
  return seed;
}

std::shared_ptr<Module> python(const std::string& source) {
  auto module = compilePython(source, "fusion_test.py", FrontendOptions{});
  EXPECT_TRUE(module.hasValue()) << (module ? "" : module.status().toString());
  if (!module) return nullptr;
  Status verified = verifyModule(*module);
  EXPECT_TRUE(verified.isOk()) << verified.toString();
  return std::make_shared<Module>(std::move(*module));
}

std::shared_ptr<Module> svasm(const std::string& text) {
  auto module = assemble(text, "fusion_test.svasm");
  EXPECT_TRUE(module.hasValue()) << (module ? "" : module.status().toString());
  if (!module) return nullptr;
  EXPECT_TRUE(verifyModule(*module).isOk());
  return std::make_shared<Module>(std::move(*module));
}

std::string readRepoFile(const std::string& relative) {
  std::ifstream in(std::string(SHAPEVM_SOURCE_DIR) + "/" + relative, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// Uniform in [-spread, spread] (never all zeros), in the given layout.
Value rnd(std::mt19937& rng, DType dtype, std::vector<std::int64_t> dims, Layout layout = Layout::Contiguous,
          double spread = 2.0) {
  Shape shape;
  for (std::int64_t d : dims) shape.push_back(d);
  return Value::fromTensor(shapevm::testing::randomTensor(dtype, shape, rng, layout, spread));
}

using InputFn = std::function<std::vector<Value>(int run, std::mt19937& rng)>;

struct Report {
  JitStats stats;
  std::vector<Jit::RangeState> ranges;
  std::vector<std::uint64_t> served;    // per run: executions served by an installed region (0 if any declined)
  std::vector<std::uint64_t> declines;  // per run: region executions declined
  std::string installed() const {
    std::string text;
    for (const Jit::RangeState& r : ranges) {
      text +=
          fmt::format("[range 0x{:02X}..0x{:02X} phase {} compiles {} failures {}: {}] ", r.range.start_pc,
                      r.range.resume_pc - 1, static_cast<int>(r.phase), r.compiles, r.backoff.failures, r.description);
    }
    return text;
  }
  int installedRanges() const {
    int n = 0;
    for (const Jit::RangeState& r : ranges) n += r.phase == Jit::RangeState::Phase::Installed && r.compiles > 0;
    return n;
  }
  bool describes(const std::string& needle) const {
    for (const Jit::RangeState& r : ranges) {
      if (r.description.find(needle) != std::string::npos) return true;
    }
    return false;
  }
};

class FusionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Tunables::resetToDefaults();
    ASSERT_TRUE(Tunables::set(Tunable::JitLevel, 2).isOk());
    ASSERT_TRUE(Tunables::set(Tunable::WarmupRuns, 0).isOk());
    ASSERT_TRUE(Tunables::set(Tunable::HotCount, 0).isOk());
    ASSERT_TRUE(Tunables::set(Tunable::HotMs, 0).isOk());
    // One kernel thread (kernel_threads=auto would follow the host): row blocking, which these
    // tests expect, runs only when kernels are not split across threads.
    ASSERT_TRUE(Tunables::set(Tunable::KernelThreads, 1).isOk());
    // SHAPEVM_FUSION_TEST_LOG=1 prints the JIT's log (why a region declined or failed).
    if (std::getenv("SHAPEVM_FUSION_TEST_LOG") != nullptr) {
      ASSERT_TRUE(Tunables::set(Tunable::JitLog, 1).isOk());
    }
  }
  void TearDown() override { Tunables::resetToDefaults(); }

  // Runs `fn` `runs` times at O0 and at O2 on the same fresh inputs; every output must agree within
  // the validation bound, times `tolerance_scale` for programs whose loop feeds each step's
  // rounding into the next.
  ::testing::AssertionResult differential(const std::shared_ptr<Module>& module, const std::string& fn, int runs,
                                          const InputFn& make, Report* report, double tolerance_scale = 1.0) {
    if (!module) return ::testing::AssertionFailure() << "no module";
    auto index = resolveFunction(*module, fn);
    if (!index) return ::testing::AssertionFailure() << index.status().toString();
    VirtualMachine reference(module);
    VirtualMachine vm(module);
    JitOptions options;
    options.level = 2;
    options.wait_for_compiles = true;
    options.first_sight = false;  // the tier-up (recompiles, declines), whatever the shared cache holds
    auto jit = Jit::attach(vm, options);
    if (!jit) return ::testing::AssertionFailure() << jit.status().toString();
    std::mt19937 rng(baseSeed() ^ static_cast<std::uint32_t>(std::hash<std::string>{}(
                                      ::testing::UnitTest::GetInstance()->current_test_info()->name() + fn)));
    for (int run = 0; run < runs; ++run) {
      std::vector<Value> inputs = make(run, rng);
      std::vector<const Value*> pointers;
      for (const Value& v : inputs) pointers.push_back(&v);
      auto want = reference.run(*index, inputs);
      if (!want) return ::testing::AssertionFailure() << "O0 run " << run << " failed: " << want.status().toString();
      // Region entries count one compiled call at the range's first CallOp slot per execution.
      auto servedNow = [&] {
        std::uint64_t total = 0;
        for (const Jit::RangeState& r : (*jit)->rangeStates(*index)) {
          total += vm.runtime(*index).slots[static_cast<std::size_t>(r.range.sites[0])].compiled_calls.load();
        }
        return total;
      };
      const std::uint64_t served_before = servedNow();
      auto got = vm.run(*index, inputs);
      if (!got) return ::testing::AssertionFailure() << "O2 run " << run << " failed: " << got.status().toString();
      Comparison comparison = compareOutputs(*want, *got);
      if (!comparison.ok && tolerance_scale > 1.0 && want->size() == got->size()) {
        comparison.ok = true;  // output by output: only a relative L2 error within the scaled bound passes
        for (std::size_t o = 0; o < want->size() && comparison.ok; ++o) {
          const Comparison one =
              compareOutputs(std::span<const Value>(&(*want)[o], 1), std::span<const Value>(&(*got)[o], 1));
          const bool scaled_ok = one.reason.find("relative L2 error") != std::string::npos && (*want)[o].isTensor() &&
                                 one.rel_l2 <= toleranceFor((*want)[o].tensor().dtype()) * tolerance_scale;
          if (!one.ok && !scaled_ok) comparison = one;
        }
      }
      if (!comparison.ok) {
        return ::testing::AssertionFailure() << "O2 differs from O0 on run " << run << " (seed " << baseSeed()
                                             << ", inputs " << describeInputs(pointers) << "): " << comparison.reason
                                             << "\nranges: " << Report{(*jit)->stats(), (*jit)->rangeStates(*index), {}, {}}.installed();
      }
      if (report != nullptr) {
        // Compiled calls at an entry slot also count O1 kernels there (installed once a region
        // declines): a run with declines counts as not served.
        const std::uint64_t declines = (*jit)->stats().region_declines;
        const bool declined = !report->declines.empty() ? declines > report->declines.back() : declines > 0;
        report->served.push_back(declined ? 0 : servedNow() - served_before);
        report->declines.push_back(declines);
      }
    }
    if (report != nullptr) {
      report->stats = (*jit)->stats();
      report->ranges = (*jit)->rangeStates(*index);
    }
    return ::testing::AssertionSuccess();
  }

  // A region was installed, nothing failed, every run after the first was served (at least
  // `per_run` region executions each) and, unless allowed, nothing declined.
  static void expectServed(const Report& r, std::uint64_t per_run = 1, bool declines_allowed = false) {
    SCOPED_TRACE(r.installed());
    EXPECT_GE(r.stats.fused_regions, 1u);
    EXPECT_GE(r.installedRanges(), 1);
    EXPECT_EQ(r.stats.validation_failures, 0u);
    EXPECT_EQ(r.stats.compile_failures, 0u);
    if (!declines_allowed) {
      EXPECT_EQ(r.stats.region_declines, 0u);
    }
    for (std::size_t run = 1; run < r.served.size(); ++run) {
      if (!declines_allowed) {
        EXPECT_GE(r.served[run], per_run) << "run " << run << " not served by the fused region";
      }
    }
  }
};

constexpr DType kFloatTypes[] = {DType::Float32, DType::Float16, DType::BFloat16};

// ---- elementwise chains with broadcasting ----

constexpr const char* kBroadcastChain = R"(
from shapevm import ops, Tensor

def f(x: Tensor["n", "m"], row: Tensor["m"], col: Tensor["n", 1], s: Tensor[1], y: Tensor["n", "m"]):
    a = ops.sigmoid(x * row + col)
    b = ops.tanh(a - s) * y
    d = ops.maximum(b, x) / (ops.exp(col) + s * s + row * row)
    return ops.minimum(d, a) - ops.neg(ops.abs(col))
)";

TEST_F(FusionTest, BroadcastingElementwiseChainEqualsO0InEveryDtype) {
  auto module = python(kBroadcastChain);
  for (DType dtype : kFloatTypes) {
    for (std::int64_t n : {1, 7, 17}) {
      for (std::int64_t m : {1, 7, 63, 65}) {
        SCOPED_TRACE(fmt::format("{} n={} m={}", dtypeName(dtype), n, m));
        Report report;
        ASSERT_TRUE(differential(module, "f", 3, [&](int, std::mt19937& rng) {
          return std::vector<Value>{rnd(rng, dtype, {n, m}), rnd(rng, dtype, {m}), rnd(rng, dtype, {n, 1}),
                                    rnd(rng, dtype, {1}), rnd(rng, dtype, {n, m})};
        }, &report));
        expectServed(report);
        EXPECT_TRUE(report.describes("fused(")) << report.installed();
      }
    }
  }
}

// ---- matmul + bias + activation, residuals ----

std::string matmulActivation(const std::string& act) {
  return fmt::format(R"(
from shapevm import ops, Tensor

def f(x: Tensor["n", "k"], w: Tensor["k", "m"], b: Tensor["m"]):
    return ops.{}(x @ w + b)
)", act);
}

TEST_F(FusionTest, MatmulBiasActivationEpilogues) {
  for (const char* act : {"sigmoid", "tanh", "relu", "gelu"}) {
    auto module = python(matmulActivation(act));
    for (DType dtype : kFloatTypes) {
      for (auto [n, k, m] : {std::tuple<std::int64_t, std::int64_t, std::int64_t>{1, 7, 17}, {17, 63, 65}, {65, 1, 7}}) {
        SCOPED_TRACE(fmt::format("{} {} n={} k={} m={}", act, dtypeName(dtype), n, k, m));
        Report report;
        ASSERT_TRUE(differential(module, "f", 3, [&](int, std::mt19937& rng) {
          return std::vector<Value>{rnd(rng, dtype, {n, k}), rnd(rng, dtype, {k, m}, Layout::Contiguous, 0.5),
                                    rnd(rng, dtype, {m})};
        }, &report));
        expectServed(report);
        EXPECT_TRUE(report.describes(std::string("matmul+add+") + act)) << report.installed();
      }
    }
  }
}

constexpr const char* kResidual = R"(
from shapevm import ops, Tensor

def f(x: Tensor["n", "k"], w: Tensor["k", "m"], b: Tensor["m"], r: Tensor["n", "m"], col: Tensor["n", 1]):
    y = x @ w + b + r
    z = r - x @ w
    u = ops.tanh(x @ w + col)
    return y, z, u
)";

TEST_F(FusionTest, MatmulResidualAddAndColumnBias) {
  auto module = python(kResidual);
  for (DType dtype : kFloatTypes) {
    for (std::int64_t n : {1, 17, 64}) {
      SCOPED_TRACE(fmt::format("{} n={}", dtypeName(dtype), n));
      Report report;
      ASSERT_TRUE(differential(module, "f", 3, [&](int, std::mt19937& rng) {
        return std::vector<Value>{rnd(rng, dtype, {n, 33}), rnd(rng, dtype, {33, 17}, Layout::Contiguous, 0.5),
                                  rnd(rng, dtype, {17}), rnd(rng, dtype, {n, 17}), rnd(rng, dtype, {n, 1})};
      }, &report));
      expectServed(report);
      EXPECT_TRUE(report.describes("matmul+add_n")) << report.installed();
    }
  }
}

// A bias as long as the product's rows is baked into the region's matmul kernel as that length
// (vector loads in the tiles); one that turns into a broadcast [1] later fails the step's guard
// and the range runs op by op (or recompiles), and one planned as [1] stays a broadcast: results
// equal O0 in both orders, across the dot path (2 rows), whole tiles and a 1-row tail (13 rows).
constexpr const char* kUntypedBias = R"(
from shapevm import ops, Tensor

def f(x: Tensor, w: Tensor, b: Tensor):
    return ops.tanh(x @ w + b)
)";

TEST_F(FusionTest, EpilogueBiasLengthBakedInOrBroadcastKeepsResults) {
  auto module = python(kUntypedBias);
  for (bool full_first : {true, false}) {
    for (std::int64_t n : {2, 13}) {
      SCOPED_TRACE(fmt::format("full first {} n={}", full_first, n));
      Report report;
      ASSERT_TRUE(differential(
          module, "f", 7,
          [&](int run, std::mt19937& rng) {
            const bool full = (run < 4) == full_first;
            return std::vector<Value>{rnd(rng, DType::Float32, {n, 40}),
                                      rnd(rng, DType::Float32, {40, 96}, Layout::Contiguous, 0.5),
                                      rnd(rng, DType::Float32, {full ? std::int64_t{96} : std::int64_t{1}})};
          },
          &report));
      SCOPED_TRACE(report.installed());
      EXPECT_GE(report.stats.fused_regions, 1u);
      EXPECT_EQ(report.stats.validation_failures, 0u);
      EXPECT_EQ(report.stats.compile_failures, 0u);
    }
  }
}

// A fused kernel with two outputs (each its own alias scope: no run-time overlap check between
// them), over extents with and without a vector remainder, equals O0. The second output is a
// product: as a difference (tanh(x + y) - a) a 1x1 draw near cancellation turned the compiled
// tanh's last-ulp difference into any relative error (5.9e-5 on one seed).
constexpr const char* kTwoOutputs = R"(
from shapevm import ops, Tensor

def f(x: Tensor, y: Tensor):
    a = ops.sigmoid(x) * y
    return a, ops.tanh(x + y) * a
)";

TEST_F(FusionTest, TwoOutputFusedKernelsEqualO0) {
  auto module = python(kTwoOutputs);
  for (auto [rows, cols] : {std::pair<std::int64_t, std::int64_t>{3, 17}, {4, 256}, {1, 1}, {9, 301}}) {
    SCOPED_TRACE(fmt::format("{}x{}", rows, cols));
    Report report;
    ASSERT_TRUE(differential(
        module, "f", 3,
        [&](int, std::mt19937& rng) {
          return std::vector<Value>{rnd(rng, DType::Float32, {rows, cols}), rnd(rng, DType::Float32, {rows, cols})};
        },
        &report));
    expectServed(report);
    EXPECT_TRUE(report.describes("fused(")) << report.installed();
  }
}

// Region inputs with unusual layouts (strided, transposed, negative steps): results always equal
// O0 and the region must serve them (the planner once drew contiguous stand-ins; see the note).
constexpr const char* kBugPlannerLayouts =
    "REGRESSION of the fixed bug region-planning-layouts: compileRegion (src/jit/region.cc) plans, compiles and validates on "
    "randomInputs() stand-ins that are always contiguous (operandFor() copies dtype and dims from the "
    "ProfileRecord but ignores OperandProfile::strides), while the matmul spec comes from the profile "
    "(inferSpec on the observed layouts). So (a) a matmul operand that is contiguous at run time but "
    "strided in the planning run (W.T of a transposed W) fails the matmul guard in the validation run: "
    "'Compile failed ... matmul guard' (counted as CodegenFailed, blacklisted after 3), the region never "
    "installs; (b) epilogue operands (bias, residual) are compiled as contiguous (spec.inputs[e].contiguous "
    "from the stand-ins), so strided ones fail the guard on every execution; (c) fused leaves get "
    "leaf_inner = 1 from the stand-ins, so a strided input (x[:, ::2], x[:, ::-1], a transposed input) "
    "fails the fused kernel's inner-stride check on every execution. (b) and (c) decline forever "
    "(recompiles draw the same contiguous stand-ins); results stay equal to O0.";

constexpr const char* kMatmulEpilogue = R"(
from shapevm import ops, Tensor

def f(x: Tensor["n", "k"], w: Tensor["m", "k"], b: Tensor["m"], r: Tensor["n", "m"]):
    return ops.sigmoid(x @ w.T + b) * r + r
)";

// The usual transposed weight: W [m,k] contiguous, W.T a strided matmul operand.
TEST_F(FusionTest, TransposedWeightParameterIsServed) {
  auto module = python(kMatmulEpilogue);
  for (DType dtype : kFloatTypes) {
    for (std::int64_t n : {1, 7, 65}) {
      SCOPED_TRACE(fmt::format("{} n={}", dtypeName(dtype), n));
      Report report;
      ASSERT_TRUE(differential(module, "f", 3, [&](int, std::mt19937& rng) {
        return std::vector<Value>{rnd(rng, dtype, {n, 65}), rnd(rng, dtype, {17, 65}, Layout::Contiguous, 0.5),
                                  rnd(rng, dtype, {17}), rnd(rng, dtype, {n, 17})};
      }, &report));
      expectServed(report);
      EXPECT_TRUE(report.describes("matmul+add+sigmoid+mul+add")) << report.installed();
    }
  }
}

// Every input transposed or strided: results equal O0 whatever the region does.
TEST_F(FusionTest, NonContiguousInputsEqualO0) {
  auto module = python(kMatmulEpilogue);
  for (DType dtype : kFloatTypes) {
    for (Layout layout : {Layout::Transposed, Layout::Strided}) {
      SCOPED_TRACE(fmt::format("{} layout {}", dtypeName(dtype), static_cast<int>(layout)));
      ASSERT_TRUE(differential(module, "f", 4, [&](int, std::mt19937& rng) {
        return std::vector<Value>{rnd(rng, dtype, {7, 65}, layout), rnd(rng, dtype, {17, 65}, layout, 0.5),
                                  rnd(rng, dtype, {17}, layout), rnd(rng, dtype, {7, 17}, layout)};
      }, nullptr));
    }
  }
}

// (a) W passed transposed, so W.T is contiguous at run time.
TEST_F(FusionTest, MatmulOperandContiguousOnlyAtRunTimeFuses) {
  auto module = python(kMatmulEpilogue);
  Report report;
  ASSERT_TRUE(differential(module, "f", 4, [&](int, std::mt19937& rng) {
    return std::vector<Value>{rnd(rng, DType::Float32, {7, 65}), rnd(rng, DType::Float32, {17, 65}, Layout::Transposed, 0.5),
                              rnd(rng, DType::Float32, {17}), rnd(rng, DType::Float32, {7, 17})};
  }, &report));
  if (report.stats.fused_regions == 0 && report.stats.compile_failures > 0) {
    FAIL() << kBugPlannerLayouts << " (case a) " << report.installed();
  }
  expectServed(report);
}

// (b) a strided residual and bias (x and W contiguous).
TEST_F(FusionTest, StridedEpilogueOperandsAreServed) {
  auto module = python(kMatmulEpilogue);
  Report report;
  ASSERT_TRUE(differential(module, "f", 10, [&](int, std::mt19937& rng) {
    return std::vector<Value>{rnd(rng, DType::Float32, {7, 65}), rnd(rng, DType::Float32, {17, 65}, Layout::Contiguous, 0.5),
                              rnd(rng, DType::Float32, {17}, Layout::Strided), rnd(rng, DType::Float32, {7, 17}, Layout::Strided)};
  }, &report));
  std::uint64_t late = 0;
  for (std::size_t run = 5; run < report.served.size(); ++run) late += report.served[run];
  if (late == 0 && report.stats.region_declines > 0) FAIL() << kBugPlannerLayouts << " (case b) " << report.installed();
  EXPECT_GT(late, 0u);
}

// ---- views inside the chain ----

constexpr const char* kViews = R"(
from shapevm import ops, Tensor

def f(x: Tensor["n", 16], r: Tensor[16], w: Tensor[16, "n"], z: Tensor["n", 1, 8]):
    a = ops.sigmoid(x * r)
    t = ops.transpose(a) * w
    u = ops.tanh(ops.transpose(t))
    p, q = ops.split(u, 2, axis=1)
    s = ops.squeeze(z, 1)
    v = ops.unsqueeze(p * q + s, 1)
    return ops.relu(v - z) + ops.unsqueeze(ops.transpose(w)[:, 0:8], 1)
)";

TEST_F(FusionTest, TransposeSplitSqueezeUnsqueezeViewsInsideTheChain) {
  auto module = python(kViews);
  for (DType dtype : kFloatTypes) {
    for (std::int64_t n : {1, 7, 17, 63}) {
      SCOPED_TRACE(fmt::format("{} n={}", dtypeName(dtype), n));
      Report report;
      ASSERT_TRUE(differential(module, "f", 3, [&](int, std::mt19937& rng) {
        return std::vector<Value>{rnd(rng, dtype, {n, 16}), rnd(rng, dtype, {16}), rnd(rng, dtype, {16, n}),
                                  rnd(rng, dtype, {n, 1, 8})};
      }, &report));
      expectServed(report);
    }
  }
}

// Pay-off aware compiling (compile_payoff_ms): without wait_for_compiles, a hot range's first
// compile waits until its interpreted time x kCompiledGain repays its kernels x the per-kernel
// estimate. An estimate no run repays keeps it interpreted (counted as deferred, results still
// right); 0 compiles it as soon as it is hot.
TEST_F(FusionTest, ARegionCompileWaitsUntilItsInterpretedTimeRepaysTheEstimate) {
  ASSERT_TRUE(Tunables::set(Tunable::HotMs, 1).isOk());  // hot_ms = 0 would compile at once
  auto module = python(R"(
from shapevm import ops, Tensor

def f(x: Tensor["n", 64], w: Tensor[64, 64], b: Tensor[64]):
    return ops.tanh(x @ w + b)
)");
  ASSERT_TRUE(module);
  auto index = resolveFunction(*module, "f");
  ASSERT_TRUE(index.hasValue());
  for (const std::int64_t estimate_ms : {std::int64_t{1000000}, std::int64_t{0}}) {
    SCOPED_TRACE(fmt::format("compile_payoff_ms={}", estimate_ms));
    ASSERT_TRUE(Tunables::set(Tunable::CompilePayoffMs, estimate_ms).isOk());
    VirtualMachine reference(module);
    VirtualMachine vm(module);
    JitOptions options;
    options.level = 2;  // no wait_for_compiles: pay-off waiting applies
    options.first_sight = false;  // the deferral, whatever an earlier run left in the shared cache
    auto jit = Jit::attach(vm, options);
    ASSERT_TRUE(jit.hasValue()) << jit.status().toString();
    std::mt19937 rng(11);
    for (int run = 0; run < 12; ++run) {
      const std::vector<Value> inputs = {rnd(rng, DType::Float32, {512, 64}), rnd(rng, DType::Float32, {64, 64}),
                                         rnd(rng, DType::Float32, {64})};
      auto want = reference.run(*index, inputs);
      auto got = vm.run(*index, inputs);
      ASSERT_TRUE(want.hasValue() && got.hasValue());
      EXPECT_TRUE(compareOutputs(*want, *got).ok) << "run " << run;
      (*jit)->waitIdle();
    }
    const JitStats stats = (*jit)->stats();
    if (estimate_ms > 0) {
      EXPECT_EQ(stats.fused_regions, 0u) << (*jit)->statsReport();
      EXPECT_EQ(stats.compiles, 0u) << "its ops wait with it, not compiled one by one";
      EXPECT_EQ(stats.compiles_deferred, 1u) << (*jit)->statsReport();
      EXPECT_NE((*jit)->statsReport().find("not compiled yet"), std::string::npos);
    } else {
      EXPECT_EQ(stats.fused_regions, 1u) << (*jit)->statsReport();
      EXPECT_EQ(stats.compiles_deferred, 0u);
    }
  }
}

// Slices end a range (their bounds are scalars), so sliced values reach a fused range as inputs
// with an offset (inner stride 1: served) ...
TEST_F(FusionTest, SlicedInputsWithOffsetsAreServed) {
  auto module = python(R"(
from shapevm import ops, Tensor

def f(x: Tensor["n", 20], y: Tensor["n", 10]):
    a = x[:, 3:13]
    b = x[1:, 10:]
    return ops.tanh(a[1:] * y[:-1]) + ops.sigmoid(b - y[1:]) * a[:-1]
)");
  for (DType dtype : kFloatTypes) {
    for (std::int64_t n : {2, 7, 65}) {
      SCOPED_TRACE(fmt::format("{} n={}", dtypeName(dtype), n));
      Report report;
      ASSERT_TRUE(differential(module, "f", 3, [&](int, std::mt19937& rng) {
        return std::vector<Value>{rnd(rng, dtype, {n, 20}), rnd(rng, dtype, {n, 10})};
      }, &report));
      expectServed(report);
    }
  }
}

// ... or with a step of 2 and negative steps (c): results equal O0; the region should serve.
TEST_F(FusionTest, SlicedInputsWithStepsAndNegativeStrides) {
  auto module = python(R"(
from shapevm import ops, Tensor

def f(x: Tensor["n", 20], y: Tensor["n", 10]):
    a = x[:, 3:13]
    b = x[::-1, ::2]
    c = x[:, ::-2]
    return ops.tanh(a * y) + ops.sigmoid(b - y) * c
)");
  bool never_served = false;
  std::string note;
  for (DType dtype : kFloatTypes) {
    for (std::int64_t n : {1, 7, 65}) {
      SCOPED_TRACE(fmt::format("{} n={}", dtypeName(dtype), n));
      Report report;
      ASSERT_TRUE(differential(module, "f", 8, [&](int, std::mt19937& rng) {
        return std::vector<Value>{rnd(rng, dtype, {n, 20}), rnd(rng, dtype, {n, 10})};
      }, &report));
      EXPECT_GE(report.stats.fused_regions, 1u);
      std::uint64_t served = 0;
      for (std::uint64_t s : report.served) served += s;
      if (served == 0 && report.stats.region_declines > 0) {
        never_served = true;
        note = report.installed();
      }
    }
  }
  if (never_served) FAIL() << kBugPlannerLayouts << " (case c) " << note;
}

// ---- the reference workload ----

std::vector<Value> lstmInputs(std::mt19937& rng, DType dtype, std::int64_t batch, std::int64_t seq) {
  return {rnd(rng, dtype, {batch, seq, 128}, Layout::Contiguous, 1.0), rnd(rng, dtype, {batch, 256}, Layout::Contiguous, 1.0),
          rnd(rng, dtype, {batch, 256}, Layout::Contiguous, 1.0), rnd(rng, dtype, {1024, 128}, Layout::Contiguous, 0.15),
          rnd(rng, dtype, {1024, 256}, Layout::Contiguous, 0.1), rnd(rng, dtype, {1024}, Layout::Contiguous, 1.0),
          rnd(rng, dtype, {1024}, Layout::Contiguous, 1.0)};
}

TEST_F(FusionTest, LstmCellEqualsO0) {
  auto module = python(readRepoFile("examples/lstm_cell.py"));
  for (DType dtype : kFloatTypes) {
    for (std::int64_t batch : {1, 7}) {
      SCOPED_TRACE(fmt::format("{} batch={}", dtypeName(dtype), batch));
      Report report;
      ASSERT_TRUE(differential(module, "lstm_cell", 4, [&](int, std::mt19937& rng) {
        return lstmInputs(rng, dtype, batch, 5);
      }, &report));
      expectServed(report);
      EXPECT_TRUE(report.describes("matmul+add")) << report.installed();
      // The reshapes (their target tuples built by LoadConst/TuplePack between the matmuls and the
      // gate math) are views inside the range: the whole cell is one fused range.
      EXPECT_EQ(report.installedRanges(), 1) << report.installed();
      EXPECT_TRUE(report.describes("matmul+add, matmul+add, fused(")) << report.installed();
    }
  }
}

// Fault injection into the region's own step kernels (jit_test_corrupt=2: each output's first
// element flipped after every call): the region's validation, which compares with the planning
// run's written-back values only (the planning run's other values are dropped before it runs),
// must reject the region every time, so no corrupted region is ever installed and every result
// stays O0's.
TEST_F(FusionTest, ARegionWithCorruptedStepKernelsFailsValidationAndResultsStayO0) {
  ASSERT_TRUE(Tunables::set(Tunable::JitTestCorruptKernels, 2).isOk());
  auto module = python(readRepoFile("examples/lstm_cell.py"));
  for (std::int64_t batch : {1, 7}) {
    SCOPED_TRACE(fmt::format("batch={}", batch));
    Report report;
    ASSERT_TRUE(differential(
        module, "lstm_cell", 4, [&](int, std::mt19937& rng) { return lstmInputs(rng, DType::Float32, batch, 5); },
        &report));
    EXPECT_EQ(report.installedRanges(), 0) << report.installed();
    EXPECT_GT(report.stats.validation_failures, 0u) << report.installed();
    for (std::uint64_t served : report.served) EXPECT_EQ(served, 0u) << "a corrupted region ran";
  }
}

// RegionExecutor::keepOnly (what a region's validation keeps of its planning run): the kept values
// stay as they were, the others are gone and their buffers back with the allocator; a dropped
// value that a kept one views stays alive through it.
TEST(RegionExecutorKeepOnly, KeepsTheNamedValuesAndFreesTheRest) {
  std::mt19937 rng(baseSeed());
  RegionPlan plan;
  plan.values.resize(5);
  RegionExecutor executor(plan, false);
  std::vector<Value> values;
  for (int v = 0; v < 4; ++v) values.push_back(rnd(rng, DType::Float32, {64, 96 + 32 * v}));
  const Tensor& viewed = values[3].tensor();
  auto view = viewed.asStrided(Shape{32, viewed.dim(1)}, Shape{viewed.stride(0), viewed.stride(1)},
                               viewed.offset() + viewed.stride(0));
  ASSERT_TRUE(view.hasValue());
  const Value kept_view = Value::fromTensor(*view);
  std::vector<Tensor> copies;
  for (const Value& v : values) {
    auto copy = v.tensor().clone();
    ASSERT_TRUE(copy.hasValue());
    copies.push_back(std::move(*copy));
  }
  for (int v = 0; v < 4; ++v) executor.setReal(v, values[static_cast<std::size_t>(v)]);
  executor.setReal(4, kept_view);
  const float first_of_view = kept_view.tensor().data<float>()[0];
  std::int64_t dropped_bytes = 0;
  for (int v : {0, 2}) {
    const auto bytes = static_cast<std::size_t>(values[static_cast<std::size_t>(v)].tensor().numel()) * sizeof(float);
    dropped_bytes += static_cast<std::int64_t>(CachingAllocator::sizeClass(bytes));
  }
  values.clear();  // the executor holds the only references (and kept_view's copy, value 3's storage)
  const std::int64_t live_before = CachingAllocator::global().stats().live_bytes;
  const std::vector<int> kept = {1, 4};
  executor.keepOnly(kept);
  EXPECT_FALSE(executor.hasReal(0));
  EXPECT_FALSE(executor.hasReal(2));
  EXPECT_FALSE(executor.hasReal(3)) << "dropped, though its storage lives on in value 4";
  ASSERT_TRUE(executor.hasReal(1));
  ASSERT_TRUE(executor.hasReal(4));
  EXPECT_EQ(CachingAllocator::global().stats().live_bytes, live_before - dropped_bytes)
      << "values 0 and 2 went back to the allocator; value 3's storage is held by the kept view";
  const Tensor& one = executor.realValue(1).tensor();
  ASSERT_EQ(one.shape(), copies[1].shape());
  for (std::int64_t i = 0; i < one.numel(); ++i) ASSERT_EQ(one.data<float>()[i], copies[1].data<float>()[i]) << i;
  EXPECT_EQ(executor.realValue(4).tensor().data<float>()[0], first_of_view);
  EXPECT_EQ(first_of_view, copies[3].data<float>()[copies[3].stride(0)]);
}

// Reshapes inside a range whose target shape changes every run (a tuple built in the range from
// dims read before it), including a reshape of a non-contiguous value (a copy, not a view).
TEST_F(FusionTest, ReshapesInsideARangeFollowTheirTargetShapes) {
  auto module = python(R"(
from shapevm import ops, Tensor

def f(x: Tensor["b", "s", 16], y: Tensor["b", "s", 16], w: Tensor[16, 8]):
    b, s, _ = x.shape
    a = ops.reshape(x * y, (b * s, 16)) @ w
    z = ops.reshape(ops.sigmoid(a) + a, (b, s, 8))
    t = ops.transpose(x + y, (1, 0, 2))
    u = ops.reshape(t, (s, b * 16))
    return ops.exp(z) - z, ops.tanh(u) * u
)");
  const std::int64_t seqs[] = {3, 3, 3, 9};
  Report report;
  ASSERT_TRUE(differential(module, "f", 4, [&](int run, std::mt19937& rng) {
    return std::vector<Value>{rnd(rng, DType::Float32, {2, seqs[run], 16}), rnd(rng, DType::Float32, {2, seqs[run], 16}),
                              rnd(rng, DType::Float32, {16, 8})};
  }, &report));
  SCOPED_TRACE(report.installed());
  EXPECT_GE(report.stats.fused_regions, 1u);
  EXPECT_EQ(report.stats.validation_failures, 0u);
  EXPECT_EQ(report.stats.compile_failures, 0u);
  EXPECT_TRUE(report.describes("matmul, fused(sigmoid,add,exp,sub")) << report.installed();
  EXPECT_EQ(report.installedRanges(), 1) << report.installed();  // the whole function, reshapes included
  EXPECT_GE(report.served[1], 1u);
  EXPECT_GE(report.served[2], 1u);
}

TEST_F(FusionTest, LstmLoopEqualsO0AndEveryStepIsServed) {
  auto module = python(readRepoFile("examples/lstm_loop.py"));
  for (DType dtype : kFloatTypes) {
    for (std::int64_t batch : {1, 17}) {
      SCOPED_TRACE(fmt::format("{} batch={}", dtypeName(dtype), batch));
      Report report;
      ASSERT_TRUE(differential(module, "lstm_loop", 4, [&](int, std::mt19937& rng) {
        return lstmInputs(rng, dtype, batch, 6);
      }, &report));
      expectServed(report, 6);
    }
  }
}

// The looped workload with seq and batch changing between runs: within and across power-of-two
// buckets. The region serves or declines (and may recompile); results always equal O0.
TEST_F(FusionTest, LstmLoopWithDynamicDimsServesOrDeclines) {
  auto module = python(readRepoFile("examples/lstm_loop.py"));
  const std::int64_t batches[] = {4, 4, 5, 7, 8, 9, 16, 17, 33, 3, 4, 65};
  const std::int64_t seqs[] = {3, 1, 2, 3, 4, 2, 1, 3, 2, 5, 3, 1};
  Report report;
  ASSERT_TRUE(differential(module, "lstm_loop", 12, [&](int run, std::mt19937& rng) {
    return lstmInputs(rng, DType::Float32, batches[run], seqs[run]);
  }, &report));
  SCOPED_TRACE(report.installed());
  EXPECT_GE(report.stats.fused_regions, 1u);
  EXPECT_EQ(report.stats.validation_failures, 0u);
  std::uint64_t served = 0;
  for (std::uint64_t s : report.served) served += s;
  EXPECT_GT(served, 0u);
}

// ---- the gate epilogue (RegionGateEpilogue): the gate math in the matmul's tiles ----

// The reference workload with the gate epilogue on: the x @ W_ih.T (cell) or h @ W_hh.T (loop)
// matmul computes the gates in its tiles and stores only h' and c', in every float dtype, for
// batch x seq rows below, at and above the tile's rows.
TEST_F(FusionTest, LstmGateEpilogueEqualsO0) {
  ASSERT_TRUE(Tunables::set(Tunable::RegionGateEpilogue, 1).isOk());
  auto cell = python(readRepoFile("examples/lstm_cell.py"));
  auto loop = python(readRepoFile("examples/lstm_loop.py"));
  for (DType dtype : kFloatTypes) {
    for (auto [batch, seq] : {std::pair<std::int64_t, std::int64_t>{1, 5}, {7, 3}, {17, 4}}) {
      SCOPED_TRACE(fmt::format("{} batch={} seq={}", dtypeName(dtype), batch, seq));
      Report report;
      ASSERT_TRUE(differential(
          cell, "lstm_cell", 3, [&](int, std::mt19937& rng) { return lstmInputs(rng, dtype, batch, seq); }, &report));
      expectServed(report);
      EXPECT_TRUE(report.describes("matmul+add, matmul+add+gates(add,sigmoid")) << report.installed();
      Report looped;
      ASSERT_TRUE(differential(
          loop, "lstm_loop", 3, [&](int, std::mt19937& rng) { return lstmInputs(rng, dtype, batch, seq); }, &looped));
      expectServed(looped, static_cast<std::uint64_t>(seq));
      EXPECT_TRUE(looped.describes("matmul+add+add_n+gates(sigmoid")) << looped.installed();
    }
  }
}

// A rank-2 program over G = 4 blocks of H = 16 with a row-dependent leaf, odd row counts (tails
// of the tile's rows) and one leaf broadcast along H; and the cases that keep two kernels: the
// product also returned, a block width that is no multiple of 16, a leaf strided along H.
TEST_F(FusionTest, GateEpilogueServesOrKeepsTwoKernels) {
  ASSERT_TRUE(Tunables::set(Tunable::RegionGateEpilogue, 1).isOk());
  auto gates = python(R"(
from shapevm import ops, Tensor

def f(x: Tensor["n", 32], w: Tensor[64, 32], b: Tensor[64], c: Tensor["n", 16], s: Tensor["n", 1]):
    g = x @ w.T + b
    a, z, u, v = ops.split(g, 4, axis=1)
    return ops.sigmoid(a) * c + ops.tanh(z) * u - v * s
)");
  const std::int64_t rows[] = {1, 7, 17, 63, 65};
  for (DType dtype : kFloatTypes) {
    SCOPED_TRACE(dtypeName(dtype));
    Report report;
    ASSERT_TRUE(differential(
        gates, "f", 5,
        [&](int run, std::mt19937& rng) {
          const std::int64_t n = rows[run];
          return std::vector<Value>{rnd(rng, dtype, {n, 32}), rnd(rng, dtype, {64, 32}, Layout::Contiguous, 0.3),
                                    rnd(rng, dtype, {64}), rnd(rng, dtype, {n, 16}), rnd(rng, dtype, {n, 1})};
        },
        &report));
    SCOPED_TRACE(report.installed());
    EXPECT_GE(report.stats.fused_regions, 1u);
    EXPECT_EQ(report.stats.validation_failures, 0u);
    EXPECT_EQ(report.stats.compile_failures, 0u);
    EXPECT_TRUE(report.describes("matmul+add+gates(sigmoid")) << report.installed();
  }
  // The product is returned too: it must be stored, so the matmul keeps its own kernel.
  auto returned = python(R"(
from shapevm import ops, Tensor

def f(x: Tensor["n", 32], w: Tensor[64, 32], c: Tensor["n", 16]):
    g = x @ w.T
    a, z, u, v = ops.split(g, 4, axis=1)
    return ops.sigmoid(a) * c + ops.tanh(z) * u - v, g
)");
  // Blocks of 8 columns: no 16-lane vector per block.
  auto narrow = python(R"(
from shapevm import ops, Tensor

def f(x: Tensor["n", 32], w: Tensor[32, 32], c: Tensor["n", 8]):
    g = x @ w.T
    a, z, u, v = ops.split(g, 4, axis=1)
    return ops.sigmoid(a) * c + ops.tanh(z) * u - v
)");
  // c read through a transpose: its stride along H is not 1.
  auto strided = python(R"(
from shapevm import ops, Tensor

def f(x: Tensor["n", 32], w: Tensor[64, 32], ct: Tensor[16, "n"]):
    g = x @ w.T
    a, z, u, v = ops.split(g, 4, axis=1)
    return ops.sigmoid(a) * ops.transpose(ct, (1, 0)) + ops.tanh(z) * u - v
)");
  // The product's rows regrouped with its columns (last dim 128 -> 64): block g of the views is
  // not columns g * H .. of a product row.
  auto regrouped = python(R"(
from shapevm import ops, Tensor

def f(x: Tensor["n", 32], w: Tensor[128, 32], c: Tensor["m", 16]):
    n, _ = x.shape
    g = ops.reshape(x @ w.T, (n * 2, 64))
    a, z, u, v = ops.split(g, 4, axis=1)
    return ops.sigmoid(a) * c + ops.tanh(z) * u - v
)");
  struct Case {
    const char* name;
    std::shared_ptr<Module> module;
    std::int64_t width;  // w's rows
    bool transposed_c;
    std::int64_t c_rows;  // c's rows per row of x
  };
  for (const Case& c : {Case{"returned", returned, 64, false, 1}, Case{"narrow", narrow, 32, false, 1},
                        Case{"strided", strided, 64, true, 1}, Case{"regrouped", regrouped, 128, false, 2}}) {
    SCOPED_TRACE(c.name);
    Report report;
    ASSERT_TRUE(differential(
        c.module, "f", 3,
        [&](int run, std::mt19937& rng) {
          const std::int64_t n = rows[run + 1];
          const std::int64_t h = c.width / 4 / c.c_rows;
          return std::vector<Value>{
              rnd(rng, DType::Float32, {n, 32}), rnd(rng, DType::Float32, {c.width, 32}),
              c.transposed_c ? rnd(rng, DType::Float32, {h, n}) : rnd(rng, DType::Float32, {n * c.c_rows, h})};
        },
        &report));
    SCOPED_TRACE(report.installed());
    EXPECT_GE(report.stats.fused_regions, 1u);
    EXPECT_EQ(report.stats.validation_failures, 0u);
    EXPECT_FALSE(report.describes("gates(")) << report.installed();
  }
}

// ---- multi-output ranges, liveness, registers overwritten inside a range ----

TEST_F(FusionTest, IntermediatesThatAreAlsoReturnedAreMaterialized) {
  auto module = python(R"(
from shapevm import ops, Tensor

def f(x: Tensor["n", "m"], y: Tensor["n", "m"], col: Tensor["n", 1]):
    a = ops.sigmoid(x + y)
    g = ops.exp(col * col)
    b = ops.tanh(a * x)
    c = b - a * g
    return a, c, b, g
)");
  for (DType dtype : kFloatTypes) {
    for (auto [n, m] : {std::pair<std::int64_t, std::int64_t>{1, 1}, {7, 17}, {65, 63}}) {
      SCOPED_TRACE(fmt::format("{} n={} m={}", dtypeName(dtype), n, m));
      Report report;
      ASSERT_TRUE(differential(module, "f", 3, [&](int, std::mt19937& rng) {
        return std::vector<Value>{rnd(rng, dtype, {n, m}), rnd(rng, dtype, {n, m}), rnd(rng, dtype, {n, 1})};
      }, &report));
      expectServed(report);
    }
  }
}

// `a` and `b` are read after the range (a slice ends it): they must be written back; an opaque
// op (softmax) inside the range reads a fused value, which must be materialized for it.
TEST_F(FusionTest, ValuesLiveAfterTheRangeAndOpaqueOpsInside) {
  auto module = python(R"(
from shapevm import ops, Tensor

def f(x: Tensor["n", "m"], y: Tensor["n", "m"]):
    a = ops.exp(x * y)
    b = ops.sigmoid(a + x)
    s = ops.softmax(a - b, axis=-1)
    e = ops.tanh(s * y) + b
    k = b[:, 0:1]
    return ops.tanh(a - k) * b + e
)");
  for (DType dtype : kFloatTypes) {
    for (auto [n, m] : {std::pair<std::int64_t, std::int64_t>{1, 7}, {17, 17}, {63, 65}}) {
      SCOPED_TRACE(fmt::format("{} n={} m={}", dtypeName(dtype), n, m));
      Report report;
      ASSERT_TRUE(differential(module, "f", 3, [&](int, std::mt19937& rng) {
        return std::vector<Value>{rnd(rng, dtype, {n, m}), rnd(rng, dtype, {n, m}, Layout::Contiguous, 1.0)};
      }, &report));
      expectServed(report);
      EXPECT_GE(report.installedRanges(), 2) << "both ranges (before and after the slice) fuse";
    }
  }
}

// `c = f * c + i * g` in a loop: the register c is read as a range input and overwritten inside
// the range; the tuple assignment adds Moves inside the next iteration's range.
TEST_F(FusionTest, RegisterOverwrittenInsideTheRangeOfALoop) {
  auto module = python(R"(
from shapevm import ops, Tensor

def f(x: Tensor["n", "m"], c: Tensor["n", "m"], i: Tensor["n", "m"], steps: int):
    for t in range(steps):
        g = ops.tanh(x - c)
        fgate = ops.sigmoid(x + i)
        c = fgate * c + i * g
        tmp = ops.tanh(x + c)
        x, c = c, tmp
        i = ops.sigmoid(x * c) - i
    return c, x, i
)");
  for (DType dtype : kFloatTypes) {
    for (auto [n, m] : {std::pair<std::int64_t, std::int64_t>{1, 1}, {7, 17}, {17, 65}}) {
      SCOPED_TRACE(fmt::format("{} n={} m={}", dtypeName(dtype), n, m));
      Report report;
      // 5 steps, each fed the last: the kernels' rounding (each within the bound) compounds, and a
      // single element near a cancellation (`sigmoid(x * c) - i`) magnifies it (seen: 7.6e-5 at 1x1
      // f32 in 1 of 12 runs), so 20x the bound; a wrong kernel is off by far more.
      ASSERT_TRUE(differential(
          module, "f", 4,
          [&](int, std::mt19937& rng) {
            return std::vector<Value>{rnd(rng, dtype, {n, m}), rnd(rng, dtype, {n, m}), rnd(rng, dtype, {n, m}),
                                      Value::fromInt(5)};
          },
          &report, 20.0));
      expectServed(report, 5);
    }
  }
}

// ---- dynamic dims ----

// Opaque steps with a kernel family (a softmax and a sum over the channels, not the trailing axes,
// and a cast round trip) between convs, whose steps take any batch and image size
// (openConvExtents): the region compiled on the first image serves every later one, its opaque
// steps with their own kernels (a second kernel per step leaves the token-dynamic dims open), never the reference
// kernel (stats' opaque_fallbacks), and matches O0 at each size.
// A region with unfusable (opaque) steps: softmax, a reduction, casts; n, h and w vary per run.
constexpr const char* kOpaqueSteps = R"(
from shapevm import ops, Tensor

def f(x: Tensor["n", 4, "h", "w"], w1: Tensor[8, 4, 3, 3], b1: Tensor[8], w2: Tensor[4, 8, 1, 1]):
    y = ops.relu(ops.conv(x, w1, b1, pads=(1, 1)))
    s = ops.softmax(y, axis=1)
    t = ops.sum(s * y, axis=1, keepdims=True)
    c = ops.cast(ops.cast(s - t, ops.bfloat16), ops.float32)
    return ops.conv(ops.tanh(c) * y, w2, None)
)";
constexpr std::int64_t kOpaqueStepSizes[][3] = {{1, 9, 11}, {2, 13, 7}, {1, 5, 5}, {3, 16, 12}, {1, 9, 11}, {2, 6, 17}};

std::vector<Value> opaqueStepInputs(int run, std::mt19937& rng) {
  const auto [n, h, w] = std::tuple(kOpaqueStepSizes[run][0], kOpaqueStepSizes[run][1], kOpaqueStepSizes[run][2]);
  return {rnd(rng, DType::Float32, {n, 4, h, w}), rnd(rng, DType::Float32, {8, 4, 3, 3}), rnd(rng, DType::Float32, {8}),
          rnd(rng, DType::Float32, {4, 8, 1, 1})};
}

TEST_F(FusionTest, OpaqueStepsServeEverySizeTheRegionAdmits) {
  auto module = python(kOpaqueSteps);
  Report report;
  ASSERT_TRUE(differential(module, "f", 6, opaqueStepInputs, &report));
  SCOPED_TRACE(report.installed());
  expectServed(report);
  EXPECT_TRUE(report.describes("softmax")) << "softmax is an opaque step of the region";
  EXPECT_EQ(report.stats.region_opaque_fallbacks, 0u) << "an opaque step ran the reference kernel";
  ASSERT_EQ(report.installedRanges(), 1);
  for (const Jit::RangeState& r : report.ranges) {
    if (r.phase == Jit::RangeState::Phase::Installed) {
      EXPECT_EQ(r.compiles, 1) << "one compile serves every size";
    }
  }
}

// Fault injection: every opaque step's open kernel computes wrong values (jit_test_corrupt). Its
// own validation must drop each one: the sizes they would have served run the reference kernel
// (counted), and no result changes.
TEST_F(FusionTest, CorruptedOpenKernelsAreDroppedAndTheirSizesRunTheReference) {
  ASSERT_TRUE(Tunables::set(Tunable::JitTestCorruptKernels, 1).isOk());
  auto module = python(kOpaqueSteps);
  Report report;
  ASSERT_TRUE(differential(module, "f", 6, opaqueStepInputs, &report));
  SCOPED_TRACE(report.installed());
  EXPECT_TRUE(report.describes("softmax")) << "softmax is an opaque step of the region";
  ASSERT_EQ(report.installedRanges(), 1) << "the region's own kernels are not corrupted";
  EXPECT_GT(report.stats.region_opaque_fallbacks, 0u) << "a size past the profiled one ran a corrupted open kernel";
}

TEST_F(FusionTest, DynamicDimsWithinAndAcrossBucketsServeOrDecline) {
  auto module = python(kBroadcastChain);
  const std::int64_t ns[] = {7, 8, 5, 17, 63, 64, 65, 1, 128, 3, 33, 7};
  const std::int64_t ms[] = {17, 16, 17, 1, 65, 63, 7, 64, 2, 129, 31, 17};
  for (DType dtype : kFloatTypes) {
    SCOPED_TRACE(dtypeName(dtype));
    Report report;
    ASSERT_TRUE(differential(module, "f", 12, [&](int run, std::mt19937& rng) {
      const std::int64_t n = ns[run], m = ms[run];
      return std::vector<Value>{rnd(rng, dtype, {n, m}), rnd(rng, dtype, {m}), rnd(rng, dtype, {n, 1}),
                                rnd(rng, dtype, {1}), rnd(rng, dtype, {n, m})};
    }, &report));
    SCOPED_TRACE(report.installed());
    EXPECT_GE(report.stats.fused_regions, 1u);
    EXPECT_EQ(report.stats.validation_failures, 0u);
    std::uint64_t served = 0;
    for (std::size_t run = 1; run < report.served.size(); ++run) served += report.served[run];
    EXPECT_GT(served, 5u) << "an elementwise region has no shape guard: most runs should be served";
  }
}

TEST_F(FusionTest, MatmulRegionWithVaryingRowsServesOrDeclinesAndRecompiles) {
  auto module = python(matmulActivation("tanh"));
  const std::int64_t ns[] = {16, 17, 31, 32, 33, 64, 1, 100, 7, 65, 66, 40, 41, 42, 43, 44};
  Report report;
  ASSERT_TRUE(differential(module, "f", 16, [&](int run, std::mt19937& rng) {
    return std::vector<Value>{rnd(rng, DType::Float32, {ns[run], 63}), rnd(rng, DType::Float32, {63, 17}, Layout::Contiguous, 0.5),
                              rnd(rng, DType::Float32, {17})};
  }, &report));
  SCOPED_TRACE(report.installed());
  EXPECT_GE(report.stats.fused_regions, 1u);
  EXPECT_EQ(report.stats.validation_failures, 0u);
  std::uint64_t served = 0;
  for (std::uint64_t s : report.served) served += s;
  EXPECT_GT(served, 0u);
}

// A region is planned and validated on each site's smallest observed record (fewest input
// elements, ties to the newest) unless region_plan_smallest=0 or the caller asks for the newest.
TEST(RegionPlanningShapes, SmallestRecordHasFewestElementsAndTiesGoToTheNewest) {
  auto record = [](std::vector<Shape> shapes, std::uint64_t last_seen) {
    ProfileRecord r;
    for (Shape& shape : shapes) {
      OperandProfile operand;
      operand.is_tensor = true;
      operand.shape = std::move(shape);
      r.inputs.push_back(std::move(operand));
    }
    OperandProfile scalar;  // a non-tensor input counts no elements
    scalar.kind = ValueKind::Int;
    r.inputs.push_back(scalar);
    r.last_seen = last_seen;
    return r;
  };
  const std::vector<ProfileRecord> records = {record({{640, 128}, {128, 64}}, 5), record({{320, 128}, {128, 64}}, 3),
                                              record({{960, 128}, {128, 64}}, 9), record({{320, 128}, {128, 64}}, 4)};
  EXPECT_EQ(planningRecord(records, PlanningShapes::Newest), &records[2]);
  EXPECT_EQ(planningRecord(records, PlanningShapes::Smallest), &records[3]);  // 320 rows, seen after records[1]
  EXPECT_EQ(planningRecord({}, PlanningShapes::Smallest), nullptr);
}

// Only records of the newest record's group (layout, dtype, rank) count: the step kernels' dim
// ranges span that group, so a smaller record of another layout (a batch of one read through a
// strided view in the Dask example, issue 26) would be planned on shapes no guard admits.
TEST(RegionPlanningShapes, SmallestRecordComesFromTheNewestRecordsGroup) {
  auto record = [](Shape shape, Shape strides, std::uint64_t last_seen) {
    ProfileRecord r;
    OperandProfile operand;
    operand.is_tensor = true;
    operand.shape = std::move(shape);
    operand.strides = std::move(strides);
    r.inputs.push_back(std::move(operand));
    r.last_seen = last_seen;
    return r;
  };
  const std::vector<ProfileRecord> records = {record({2, 256}, {1024, 1}, 3),  // fewest elements, strided
                                              record({16, 256}, {256, 1}, 5), record({32, 256}, {256, 1}, 9)};
  ASSERT_FALSE(sameGroup(records[0], records[2]));
  EXPECT_EQ(planningRecord(records, PlanningShapes::Smallest), &records[1]);
  EXPECT_EQ(planningRecord(records, PlanningShapes::Newest), &records[2]);
}

// Regions recompiled over varying rows agree with O0 whether they are planned on the smallest
// observed shapes (the default) or on the newest: rows 100 miss the guard of the region compiled
// for 48 rows, and the recompile then sees 40, 48 and 100 (smallest != newest).
TEST_F(FusionTest, RegionsPlannedOnTheSmallestOrNewestShapesEqualO0) {
  auto module = python(matmulActivation("tanh"));
  ASSERT_TRUE(Tunables::set(Tunable::GuardMissRecompile, 1).isOk());
  const std::int64_t ns[] = {48, 40, 100, 100};
  for (int smallest : {1, 0}) {
    SCOPED_TRACE(fmt::format("region_plan_smallest={}", smallest));
    ASSERT_TRUE(Tunables::set(Tunable::RegionPlanSmallest, smallest).isOk());
    Report report;
    ASSERT_TRUE(differential(
        module, "f", 4,
        [&](int run, std::mt19937& rng) {
          return std::vector<Value>{rnd(rng, DType::Float32, {ns[run], 63}),
                                    rnd(rng, DType::Float32, {63, 17}, Layout::Contiguous, 0.5),
                                    rnd(rng, DType::Float32, {17})};
        },
        &report));
    SCOPED_TRACE(report.installed());
    EXPECT_GE(report.stats.fused_regions, 1u);
    EXPECT_GE(report.stats.compiles, 2u) << "the region was not recompiled for the wider rows";
    EXPECT_EQ(report.stats.validation_failures, 0u);
    EXPECT_EQ(report.stats.compile_failures, 0u);
  }
}

// Inputs switching between contiguous and non-contiguous layouts between runs: a leaf compiled
// for unit inner stride must not read a transposed operand as if it were dense.
TEST_F(FusionTest, LayoutChangesBetweenRunsKeepResults) {
  auto module = python(kBroadcastChain);
  const Layout layouts[] = {Layout::Contiguous, Layout::Transposed, Layout::Strided, Layout::Contiguous,
                            Layout::Transposed, Layout::Strided};
  Report report;
  ASSERT_TRUE(differential(module, "f", 6, [&](int run, std::mt19937& rng) {
    const Layout layout = layouts[run];
    return std::vector<Value>{rnd(rng, DType::Float32, {9, 13}, layout), rnd(rng, DType::Float32, {13}, layout),
                              rnd(rng, DType::Float32, {9, 1}, layout), rnd(rng, DType::Float32, {1}),
                              rnd(rng, DType::Float32, {9, 13}, layout)};
  }, &report));
  SCOPED_TRACE(report.installed());
  EXPECT_GE(report.stats.fused_regions, 1u);
  EXPECT_EQ(report.stats.validation_failures, 0u);
}

// ---- declines ----

constexpr const char* kUntyped = R"(
from shapevm import ops, Tensor

def f(x: Tensor, y: Tensor):
    return ops.tanh(ops.sigmoid(x) * y - x)
)";

TEST_F(FusionTest, DeclinesWhenAnInputDtypeChanges) {
  auto module = python(kUntyped);
  const DType dtypes[] = {DType::Float32, DType::Float32, DType::Float32, DType::Float16, DType::BFloat16,
                          DType::Float32};
  Report report;
  ASSERT_TRUE(differential(module, "f", 6, [&](int run, std::mt19937& rng) {
    return std::vector<Value>{rnd(rng, dtypes[run], {5, 9}), rnd(rng, dtypes[run], {5, 9})};
  }, &report));
  SCOPED_TRACE(report.installed());
  EXPECT_GE(report.stats.fused_regions, 1u);
  EXPECT_GE(report.served[1], 1u);
  EXPECT_GE(report.served[2], 1u);
  EXPECT_EQ(report.declines[2], 0u);
  EXPECT_EQ(report.served[3], 0u) << "a float16 input must not run the float32 region";
  EXPECT_GT(report.declines[3], report.declines[2]);
  EXPECT_GT(report.declines[4], report.declines[3]);
  EXPECT_GE(report.served[5], 1u) << "float32 again: served";
}

TEST_F(FusionTest, DeclinesWhenAnInputRankChanges) {
  auto module = python(kUntyped);
  const std::vector<std::vector<std::int64_t>> shapes = {{5, 9}, {5, 9}, {6, 10}, {2, 3, 4}, {7}, {4, 4}};
  Report report;
  ASSERT_TRUE(differential(module, "f", 6, [&](int run, std::mt19937& rng) {
    return std::vector<Value>{rnd(rng, DType::Float32, shapes[run]), rnd(rng, DType::Float32, shapes[run])};
  }, &report));
  SCOPED_TRACE(report.installed());
  EXPECT_GE(report.stats.fused_regions, 1u);
  EXPECT_GE(report.served[1], 1u);
  EXPECT_GE(report.served[2], 1u) << "same rank, new extents: the elementwise region still serves";
  EXPECT_EQ(report.served[3], 0u) << "rank 3 must not run the rank-2 region";
  EXPECT_GT(report.declines[3], report.declines[2]);
  EXPECT_EQ(report.served[4], 0u);
  EXPECT_GT(report.declines[4], report.declines[3]);
  EXPECT_GE(report.served[5], 1u) << "rank 2 again: served";
}

// A broadcast operand whose own shape changes between runs ([m] -> [n, m]): the leaf compiled as
// a stride-0 broadcast must not be used as one when the operand is full.
TEST_F(FusionTest, BroadcastOperandBecomingFullKeepsResults) {
  auto module = python(kUntyped);
  Report report;
  ASSERT_TRUE(differential(module, "f", 6, [&](int run, std::mt19937& rng) {
    const bool full = run >= 3;
    return std::vector<Value>{rnd(rng, DType::Float32, {6, 11}),
                              full ? rnd(rng, DType::Float32, {6, 11}) : rnd(rng, DType::Float32, {1, 11})};
  }, &report));
  SCOPED_TRACE(report.installed());
  EXPECT_GE(report.stats.fused_regions, 1u);
  EXPECT_EQ(report.stats.validation_failures, 0u);
}

// sqrt/log/rsqrt/pow read a region input directly. The inputs are positive at run time, so the
// range is fine to fuse; results must equal O0 either way.
TEST_F(FusionTest, RegionReadingSqrtAndLogOfAnInputFuses) {
  auto module = python(R"(
from shapevm import ops, Tensor

def f(x: Tensor["n", "m"], y: Tensor["n", "m"]):
    return ops.sqrt(x) * y + ops.log(x) - ops.rsqrt(x)
)");
  Report report;
  ASSERT_TRUE(differential(module, "f", 3, [&](int, std::mt19937& rng) {
    Value x = rnd(rng, DType::Float32, {7, 17});
    Tensor& t = const_cast<Tensor&>(x.tensor());
    for (std::int64_t i = 0; i < t.numel(); ++i) storeFromDouble(t.rawData(), DType::Float32, i, 0.5 + std::abs(t.elementAsDouble(i)));
    return std::vector<Value>{x, rnd(rng, DType::Float32, {7, 17})};
  }, &report));
  if (report.stats.fused_regions == 0 && report.stats.validation_failures > 0) {
    FAIL() << "REGRESSION of the fixed bug region-validation-domain: compileRegion (src/jit/region.cc) draws its planning/validation "
                    "inputs with randomInputs(input_spec) whose op is unset, so sqrt/log/rsqrt/pow inputs are "
                    "negative, the reference yields NaN, compareOutputs rejects NaN == NaN and the region never "
                    "installs (results stay equal to O0). "
                 << report.installed();
  }
  expectServed(report);
}

// ---- reductions fused with their producers and consumers ----

constexpr const char* kReductions = R"(
from shapevm import ops, Tensor

def f(x: Tensor["n", "m"], y: Tensor["n", "m"], row: Tensor["m"]):
    s = ops.sum(x * y + row, axis=1, keepdims=True)
    mu = ops.mean(ops.tanh(x) - y, axis=-1)
    hi = ops.max(x - y * row, axis=1, keepdims=True)
    lo = ops.min(ops.abs(x + y), axis=(0, 1))
    z = (x - hi) * s
    return z, ops.sigmoid(mu) * 2.0, lo + hi
)";

TEST_F(FusionTest, ReductionsFuseWithProducersAndConsumers) {
  auto module = python(kReductions);
  for (DType dtype : kFloatTypes) {
    for (auto [n, m] : {std::pair<std::int64_t, std::int64_t>{1, 1}, {7, 17}, {17, 63}, {3, 65}, {65, 257}}) {
      SCOPED_TRACE(fmt::format("{} n={} m={}", dtypeName(dtype), n, m));
      Report report;
      ASSERT_TRUE(differential(module, "f", 3, [&](int, std::mt19937& rng) {
        return std::vector<Value>{rnd(rng, dtype, {n, m}), rnd(rng, dtype, {n, m}), rnd(rng, dtype, {m})};
      }, &report));
      expectServed(report);
      for (const char* kind : {"sum(mul,add)", "mean(tanh,sub)", "max(mul,sub)", "min(add,abs) over 2 axes"}) {
        EXPECT_TRUE(report.describes(kind)) << kind << ": " << report.installed();
      }
    }
  }
}

constexpr const char* kNormalizations = R"(
from shapevm import ops, Tensor

def f(x: Tensor["b", "t", "m"], bias: Tensor["m"], w: Tensor["m"], g: Tensor["t", "m"]):
    scores = x * w + bias
    p = ops.softmax(scores, axis=-1)
    lp = ops.log_softmax(scores - p, axis=2)
    n1 = ops.layer_norm(x + lp, w, bias, eps=1e-5)
    n2 = ops.layer_norm(ops.tanh(x), None, None, 1e-3)
    return ops.relu(n1) * p + lp, n2 * g
)";

TEST_F(FusionTest, SoftmaxLogSoftmaxAndLayerNormFuseWithTheirNeighbours) {
  auto module = python(kNormalizations);
  for (DType dtype : kFloatTypes) {
    for (auto [b, t, m] : {std::tuple<std::int64_t, std::int64_t, std::int64_t>{1, 1, 1}, {2, 7, 17}, {3, 5, 64}, {1, 9, 129}}) {
      SCOPED_TRACE(fmt::format("{} b={} t={} m={}", dtypeName(dtype), b, t, m));
      Report report;
      ASSERT_TRUE(differential(module, "f", 3, [&](int, std::mt19937& rng) {
        return std::vector<Value>{rnd(rng, dtype, {b, t, m}, Layout::Contiguous, 4.0), rnd(rng, dtype, {m}),
                                  rnd(rng, dtype, {m}), rnd(rng, dtype, {t, m})};
      }, &report));
      expectServed(report);
      // The statistics are reductions of the producers (never materialized); softmax's output is
      // computed inside its consumers' kernels.
      EXPECT_TRUE(report.describes("max(mul,add) over 1 axis")) << report.installed();
      EXPECT_TRUE(report.describes("sum(mul,add,sub,exp) over 1 axis")) << report.installed();
      EXPECT_TRUE(report.describes("mean(tanh) over 1 axis")) << report.installed();
      EXPECT_FALSE(report.describes("softmax")) << report.installed();
      EXPECT_FALSE(report.describes("layer_norm")) << report.installed();
    }
  }
}

// ---- softmax computing exp once: its sum step keeps exp(x - max), rescaled in place ----

// softmax and log_softmax of an elementwise producer, both returned: float32 softmax keeps exp from
// its sum step and rescales it in place (a kernel with no output of its own); log_softmax, and
// float16/bfloat16 softmax, compute their output from x and the statistics. Odd and long rows,
// row counts that change between runs, and row blocks of every size (0 = each kernel whole).
constexpr const char* kSoftmaxOfProducer = R"(
from shapevm import ops, Tensor

def f(x: Tensor["n", "m"], w: Tensor["m"], b: Tensor["m"]):
    s = x * w + b
    return ops.softmax(s, axis=-1), ops.log_softmax(s, axis=1)
)";

TEST_F(FusionTest, SoftmaxKeepsExpAndRescalesItInPlace) {
  auto module = python(kSoftmaxOfProducer);
  const std::vector<std::pair<std::int64_t, std::int64_t>> shapes = {{1, 1}, {3, 7}, {5, 17}, {37, 63}, {9, 65}, {4, 1000}, {13, 1031}};
  for (std::int64_t block_kb : {0, 1, 16}) {
    ASSERT_TRUE(Tunables::set(Tunable::RegionRowBlockKb, block_kb).isOk());
    for (DType dtype : kFloatTypes) {
      for (auto [n, m] : shapes) {
        SCOPED_TRACE(fmt::format("{} n={} m={} block {} KiB", dtypeName(dtype), n, m, block_kb));
        Report report;
        // The row count changes between runs (the same kernels serve every count).
        ASSERT_TRUE(differential(module, "f", 3, [&](int run, std::mt19937& rng) {
          const std::int64_t rows = n + run * 2;
          return std::vector<Value>{rnd(rng, dtype, {rows, m}, Layout::Contiguous, 4.0), rnd(rng, dtype, {m}), rnd(rng, dtype, {m})};
        }, &report));
        expectServed(report);
        EXPECT_TRUE(report.describes("sum(mul,add,sub,exp) over 1 axis")) << report.installed();
        // Float32 softmax: its sum step keeps exp, and the step making its output stores it in place.
        const bool keeps = dtype == DType::Float32;
        EXPECT_EQ(report.describes("exp) over 1 axis keeping 1 per element"), keeps) << report.installed();
        EXPECT_EQ(report.describes("+ 1 in place"), keeps) << report.installed();
        // Row blocks run once the largest run's rows hold well over one block.
        if (block_kb > 0 && (n + 4) * m * 4 >= 2 * block_kb * 1024) {
          EXPECT_GE(report.stats.region_row_blocked, 1u) << report.installed();
        }
        if (block_kb == 0) {
          EXPECT_EQ(report.stats.region_row_blocked, 0u) << report.installed();
        }
      }
    }
  }
}

// Rows of 100k elements: the kept exp and its double sum stay within float32 tolerance.
TEST_F(FusionTest, SoftmaxKeepingExpOverLongRowsEqualsO0) {
  auto module = python(kSoftmaxOfProducer);
  Report report;
  ASSERT_TRUE(differential(module, "f", 2, [&](int, std::mt19937& rng) {
    return std::vector<Value>{rnd(rng, DType::Float32, {3, 100003}, Layout::Contiguous, 8.0),
                              rnd(rng, DType::Float32, {100003}), rnd(rng, DType::Float32, {100003})};
  }, &report));
  expectServed(report);
  EXPECT_TRUE(report.describes("+ 1 in place")) << report.installed();
}

// A softmax output read inside the region: by a matmul and a reduction (they read it real, so
// it still keeps exp and is rescaled in place), or by elementwise ops and a view (computed inside
// their kernels from x and the statistics: no kept exp). Every case equals O0.
TEST_F(FusionTest, SoftmaxReadInsideTheRegionKeepsExpOnlyWhenReadReal) {
  auto real_readers = python(R"(
from shapevm import ops, Tensor

def f(x: Tensor["n", "m"], w: Tensor["m"], b: Tensor["m"], v: Tensor["m", 8]):
    p = ops.softmax(x * w + b, axis=-1)
    return p, ops.tanh(p @ v) + 1.0, ops.sum(p, axis=-1)
)");
  auto fused_readers = python(R"(
from shapevm import ops, Tensor

def f(x: Tensor["n", "m"], w: Tensor["m"], b: Tensor["m"], v: Tensor["m", 8]):
    p = ops.softmax(x * w + b, axis=-1)
    return p, p * w + 1.0, ops.transpose(p) * 2.0
)");
  for (std::int64_t block_kb : {0, 1}) {
    ASSERT_TRUE(Tunables::set(Tunable::RegionRowBlockKb, block_kb).isOk());
    for (auto [n, m] : {std::pair<std::int64_t, std::int64_t>{7, 17}, {33, 65}, {6, 1000}}) {
      SCOPED_TRACE(fmt::format("n={} m={} block {} KiB", n, m, block_kb));
      const InputFn inputs = [&](int, std::mt19937& rng) {
        return std::vector<Value>{rnd(rng, DType::Float32, {n, m}, Layout::Contiguous, 4.0), rnd(rng, DType::Float32, {m}),
                                  rnd(rng, DType::Float32, {m}), rnd(rng, DType::Float32, {m, 8})};
      };
      Report kept;
      ASSERT_TRUE(differential(real_readers, "f", 3, inputs, &kept));
      expectServed(kept);
      EXPECT_TRUE(kept.describes("+ 1 in place")) << kept.installed();
      Report recomputed;
      ASSERT_TRUE(differential(fused_readers, "f", 3, inputs, &recomputed));
      expectServed(recomputed);
      EXPECT_FALSE(recomputed.describes("in place")) << recomputed.installed();
      EXPECT_FALSE(recomputed.describes("keeping")) << recomputed.installed();
    }
  }
}

// ---- row blocks: a kernel and the kernels reading its output, run block by block ----

// With RegionRowBlockKb = 1 every unit of rows is its own block: the normalizations (their
// statistics, then the kernels reading them) run in row blocks and still equal O0, in every
// dtype and at odd sizes. The LSTM cell's steps run whole: a matmul never joins a block.
TEST_F(FusionTest, RowBlocksEqualO0AndRun) {
  ASSERT_TRUE(Tunables::set(Tunable::RegionRowBlockKb, 1).isOk());
  auto norms = python(kNormalizations);
  for (DType dtype : kFloatTypes) {
    // Rows are the leading dim b; blocks of 1 KiB of output hold 1 or 2 of them (a short last block).
    for (auto [b, t, m] : {std::tuple<std::int64_t, std::int64_t, std::int64_t>{5, 7, 17}, {3, 5, 64}, {9, 2, 129}}) {
      SCOPED_TRACE(fmt::format("normalizations {} b={} t={} m={}", dtypeName(dtype), b, t, m));
      Report report;
      ASSERT_TRUE(differential(norms, "f", 3, [&](int, std::mt19937& rng) {
        return std::vector<Value>{rnd(rng, dtype, {b, t, m}, Layout::Contiguous, 4.0), rnd(rng, dtype, {m}),
                                  rnd(rng, dtype, {m}), rnd(rng, dtype, {t, m})};
      }, &report));
      expectServed(report);
      EXPECT_TRUE(report.describes("; row blocks of steps 0+1+2")) << report.installed();
      EXPECT_GE(report.stats.region_row_blocked, 2u) << report.installed();
    }
  }
  auto cell = python(readRepoFile("examples/lstm_cell.py"));
  Report report;
  ASSERT_TRUE(differential(cell, "lstm_cell", 3, [&](int, std::mt19937& rng) {
    return lstmInputs(rng, DType::Float32, 13, 5);
  }, &report));
  expectServed(report);
  EXPECT_FALSE(report.describes("row blocks")) << report.installed();
  EXPECT_EQ(report.stats.region_row_blocked, 0u) << report.installed();
}

// A consumer reading a member's output across rows (here a row statistic transposed, so every
// row reads all of them) cannot run in row blocks: the block runs its kernels whole, one after
// the other, and the results still equal O0.
TEST_F(FusionTest, RowBlocksNeedRowLocalReads) {
  ASSERT_TRUE(Tunables::set(Tunable::RegionRowBlockKb, 1).isOk());
  auto module = python(R"(
from shapevm import ops, Tensor

def f(x: Tensor["n", "n"], b: Tensor["n"]):
    s = ops.sum(ops.exp(x) * b, axis=1, keepdims=True)
    return ops.tanh(x) * ops.transpose(s) + s
)");
  for (std::int64_t n : {2, 7, 65}) {
    SCOPED_TRACE(n);
    Report report;
    ASSERT_TRUE(differential(module, "f", 3, [&](int, std::mt19937& rng) {
      return std::vector<Value>{rnd(rng, DType::Float32, {n, n}), rnd(rng, DType::Float32, {n})};
    }, &report));
    expectServed(report);
    EXPECT_TRUE(report.describes("; row blocks of steps 0+1")) << report.installed();
    EXPECT_EQ(report.stats.region_row_blocked, 0u) << report.installed();
  }
}

// Reduced axes that are not trailing, and reductions of real tensors, stay their own steps.
TEST_F(FusionTest, NonTrailingReductionsStayOpaqueAndEqualO0) {
  auto module = python(R"(
from shapevm import ops, Tensor

def f(x: Tensor["n", "m"], y: Tensor["n", "m"]):
    a = ops.sum(x * y, axis=0, keepdims=True)
    p = ops.softmax(x + y, axis=0)
    return ops.exp(a) + p, ops.sum(x, axis=1)
)");
  for (auto [n, m] : {std::pair<std::int64_t, std::int64_t>{1, 7}, {17, 63}}) {
    Report report;
    ASSERT_TRUE(differential(module, "f", 3, [&](int, std::mt19937& rng) {
      return std::vector<Value>{rnd(rng, DType::Float32, {n, m}), rnd(rng, DType::Float32, {n, m})};
    }, &report));
    expectServed(report);
    EXPECT_TRUE(report.describes("softmax")) << report.installed();
  }
}

// An empty reduced axis is left to the reference (the region declines that run); a size change of
// the reduced axis is served by the same range kernel.
TEST_F(FusionTest, ReductionShapesChangeAndEmptyAxesAreDeclined) {
  auto module = python(R"(
from shapevm import ops, Tensor

def f(x: Tensor["n", "m"], y: Tensor["n", "m"]):
    return ops.sum(x * y, axis=1) * 2.0 - ops.sum(ops.exp(x), axis=1)
)");
  Report report;
  const std::int64_t widths[] = {17, 31, 0, 64, 5};
  ASSERT_TRUE(differential(module, "f", 5, [&](int run, std::mt19937& rng) {
    const std::int64_t m = widths[run];
    return std::vector<Value>{rnd(rng, DType::Float32, {9, m}), rnd(rng, DType::Float32, {9, m})};
  }, &report));
  SCOPED_TRACE(report.installed());
  EXPECT_GE(report.stats.fused_regions, 1u);
  EXPECT_EQ(report.stats.validation_failures, 0u);
  EXPECT_GE(report.stats.region_declines, 1u);  // the empty run
  EXPECT_GE(report.served[1], 1u);
  EXPECT_GE(report.served[4], 1u);
}

// Static dims and divisors of the shape tokens are baked into the fused kernels (and checked on
// every call); the results stay equal to O0 for every size the tokens allow.
TEST_F(FusionTest, StaticDimsAndDivisorsFromShapeTokensAreBakedIn) {
  auto module = svasm(R"(.module "fusion"
.func f
  .param a : f32[?0,?1%16]
  .param b : f32[?0,?1%16]
  .param c : f32[?0,64]
  .outputs 2
  LoadTensor r0, a
  LoadTensor r1, b
  LoadTensor r2, c
  CallOp mul r3 = r0, r1 : f32[?0,?1%16] x f32[?0,?1%16] -> f32[?0,?1%16]
  CallOp tanh r4 = r3 : f32[?0,?1%16] -> f32[?0,?1%16]
  CallOp exp r5 = r2 : f32[?0,64] -> f32[?0,64]
  CallOp sum r6 = r5 {axes=[1], keepdims=true} : f32[?0,64] -> f32[?0,1]
  CallOp div r7 = r5, r6 : f32[?0,64] x f32[?0,1] -> f32[?0,64]
  StoreTensor r4, o0
  StoreTensor r7, o1
  Return
.end
)");
  Report report;
  const std::int64_t rows[] = {3, 1, 17, 8};
  const std::int64_t cols[] = {16, 48, 160, 32};
  ASSERT_TRUE(differential(module, "f", 4, [&](int run, std::mt19937& rng) {
    return std::vector<Value>{rnd(rng, DType::Float32, {rows[run], cols[run]}), rnd(rng, DType::Float32, {rows[run], cols[run]}),
                              rnd(rng, DType::Float32, {rows[run], 64})};
  }, &report));
  expectServed(report);
  EXPECT_TRUE(report.describes("sum(exp) over 1 axis of 1 leaves [d1=64]")) << report.installed();
  EXPECT_TRUE(report.describes("[d1%16]")) << report.installed();
}

// The fused family itself: a reduction program with a baked static dim and a divisor, against its
// own reference semantics; shapes that break the baked facts are refused (the region declines).
TEST_F(FusionTest, FusedReductionKernelChecksItsBakedDims) {
  auto engine = LlvmCpuBackend::create();
  ASSERT_TRUE(engine.hasValue()) << engine.status().toString();
  for (FusedProgram::Reduce reduce : {FusedProgram::Reduce::Sum, FusedProgram::Reduce::Mean, FusedProgram::Reduce::Max,
                                      FusedProgram::Reduce::Min}) {
    auto program = std::make_shared<FusedProgram>();
    program->rank = 3;
    program->leaf_inner = {1, 0};
    program->leaf_dtype = {DType::Float32, DType::Float32};
    program->static_dims = {-1, 5, -1};
    program->divisors = {1, 1, 8};
    program->nodes.push_back(FusedProgram::Node{OpId::Mul, FusedProgram::leafRef(0), FusedProgram::leafRef(1)});
    program->nodes.push_back(FusedProgram::Node{OpId::Tanh, 0, -1});
    program->outputs = {1};
    program->reduce = reduce;
    program->reduce_axes = 2;
    program->keepdims = reduce == FusedProgram::Reduce::Sum;
    KernelSpec spec;
    spec.fused = program;
    for (int k = 0; k < 2; ++k) {
      OperandSpec operand;
      operand.rank = 3;
      operand.contiguous = false;
      spec.inputs.push_back(operand);
    }
    auto kernel = compileKernel(**engine, *fusedFamily(), spec);
    ASSERT_TRUE(kernel.hasValue()) << kernel.status().toString();
    std::mt19937 rng(baseSeed());
    for (auto [n, m, ok] : {std::tuple<std::int64_t, std::int64_t, bool>{3, 16, true}, {1, 8, true}, {4, 24, true},
                            {3, 12, false}}) {
      SCOPED_TRACE(fmt::format("reduce {} n={} m={}", static_cast<int>(reduce), n, m));
      Value x = rnd(rng, DType::Float32, {n, 5, m});
      Value row = rnd(rng, DType::Float32, {n, 5, 1});
      auto broadcast = row.tensor().asStrided(Shape{n, 5, m}, Shape{5, 1, 0}, 0);
      ASSERT_TRUE(broadcast.hasValue());
      Value y = Value::fromTensor(*broadcast);
      std::vector<const Value*> inputs{&x, &y};
      std::vector<Value> got(1), want(1);
      const Status status = invokeCompiled(**kernel, inputs, got);
      EXPECT_EQ(status.isOk(), ok) << status.toString();
      if (!ok) continue;
      ASSERT_TRUE(fusedFamily()->reference(spec, inputs, want).isOk());
      const Comparison comparison = compareOutputs(want, got);
      EXPECT_TRUE(comparison.ok) << comparison.reason;
      EXPECT_EQ(got[0].tensor().shape(), program->keepdims ? Shape({n, 1, 1}) : Shape({n}));
    }
    // A wrong static dim is refused too.
    Value x = rnd(rng, DType::Float32, {2, 6, 8});
    std::vector<const Value*> inputs{&x, &x};
    std::vector<Value> got(1);
    EXPECT_FALSE(invokeCompiled(**kernel, inputs, got).isOk());
  }
}

// Shape arithmetic inside a range is replayed at the region's entry only when that is the same as
// running it in place: LoadConst overwriting r3 (written by the range's tanh) ends the range
// instead, while DimOf/Mul/TuplePack of region inputs (the reshape's target) join the next one.
TEST_F(FusionTest, ShapeArithmeticInsideARangeIsReplayedOnlyWhenSafe) {
  auto module = svasm(R"(.module "fusion"
.const k0 = int 7
.func f
  .param a : f32[?0,?1]
  .param b : f32[?0,?1]
  .outputs 2
  LoadTensor r0, a
  LoadTensor r1, b
  DimOf r7, r0, 0
  CallOp mul r2 = r0, r1 : f32[?0,?1] x f32[?0,?1] -> f32[?0,?1]
  CallOp tanh r3 = r2 : f32[?0,?1] -> f32[?0,?1]
  Move r4, r3
  LoadConst r3, k0
  CallOp add r5 = r4, r0 : f32[?0,?1] x f32[?0,?1] -> f32[?0,?1]
  DimOf r8, r0, 1
  Mul r9, r7, r8
  TuplePack r10, [r9]
  CallOp reshape r11 = r5, r10 : f32[?0,?1] x _ -> f32[?2]
  CallOp exp r6 = r11 : f32[?2] -> f32[?2]
  CallOp sigmoid r12 = r6 : f32[?2] -> f32[?2]
  StoreTensor r12, o0
  StoreTensor r4, o1
  Return
.end
)");
  Report report;
  const std::int64_t cols[] = {9, 9, 4};
  ASSERT_TRUE(differential(module, "f", 3, [&](int run, std::mt19937& rng) {
    return std::vector<Value>{rnd(rng, DType::Float32, {5, cols[run]}), rnd(rng, DType::Float32, {5, cols[run]})};
  }, &report));
  SCOPED_TRACE(report.installed());
  EXPECT_EQ(report.stats.validation_failures, 0u);
  EXPECT_EQ(report.installedRanges(), 2);
  bool replayed = false;
  for (const Jit::RangeState& r : report.ranges) {
    // No range spans the LoadConst at PC 0x06.
    EXPECT_FALSE(r.range.start_pc < 0x06 && r.range.resume_pc > 0x06);
    replayed = replayed || (r.range.start_pc == 0x07 && r.range.resume_pc == 0x0E && r.range.prelude.size() == 3);
  }
  EXPECT_TRUE(replayed);
  EXPECT_TRUE(report.describes("fused(add,exp,sigmoid")) << report.installed();
  EXPECT_GE(report.served[1], 2u);  // both regions
}

// `r7 = r7 * r8` cannot be replayed at entry: after a decline (the dtype changes in run 2) the
// interpreter would run it a second time. It ends the range instead, and every run equals O0.
TEST_F(FusionTest, SelfUpdatingShapeArithmeticIsNotReplayed) {
  auto module = svasm(R"(.module "fusion"
.func f
  .param a : [?0,?1]
  .outputs 1
  LoadTensor r0, a
  DimOf r7, r0, 0
  DimOf r8, r0, 1
  CallOp mul r2 = r0, r0 : [?0,?1] x [?0,?1] -> [?0,?1]
  CallOp tanh r3 = r2 : [?0,?1] -> [?0,?1]
  Mul r7, r7, r8
  TuplePack r9, [r7]
  CallOp reshape r4 = r3, r9 : [?0,?1] x _ -> [?2]
  CallOp exp r5 = r4 : [?2] -> [?2]
  CallOp sigmoid r6 = r5 : [?2] -> [?2]
  StoreTensor r6, o0
  Return
.end
)");
  Report report;
  const DType dtypes[] = {DType::Float32, DType::Float32, DType::Float16, DType::Float32};
  ASSERT_TRUE(differential(module, "f", 4, [&](int run, std::mt19937& rng) {
    return std::vector<Value>{rnd(rng, dtypes[run], {5, 3})};
  }, &report));
  SCOPED_TRACE(report.installed());
  for (const Jit::RangeState& r : report.ranges) {
    EXPECT_FALSE(r.range.start_pc < 0x05 && r.range.resume_pc > 0x05);  // the Mul at PC 0x05
  }
}

// The same region in a hand-written .svasm module with a Move between two CallOps.
TEST_F(FusionTest, SvasmRangeWithAMoveInside) {
  auto module = svasm(R"(.module "fusion"
.func f
  .param a : f32[?0,?1]
  .param b : f32[?0,?1]
  .outputs 2
  LoadTensor r0, a
  LoadTensor r1, b
  CallOp mul r2 = r0, r1 : f32[?0,?1] x f32[?0,?1] -> f32[?0,?1]
  Move r3, r2
  CallOp sigmoid r2 = r0 : f32[?0,?1] -> f32[?0,?1]
  CallOp add r4 = r3, r2 : f32[?0,?1] x f32[?0,?1] -> f32[?0,?1]
  CallOp tanh r5 = r4 : f32[?0,?1] -> f32[?0,?1]
  StoreTensor r5, o0
  StoreTensor r3, o1
  Return
.end
)");
  for (auto [n, m] : {std::pair<std::int64_t, std::int64_t>{1, 1}, {7, 17}, {65, 63}}) {
    SCOPED_TRACE(fmt::format("n={} m={}", n, m));
    Report report;
    ASSERT_TRUE(differential(module, "f", 3, [&](int, std::mt19937& rng) {
      return std::vector<Value>{rnd(rng, DType::Float32, {n, m}), rnd(rng, DType::Float32, {n, m})};
    }, &report));
    expectServed(report);
  }
}

// A region's kernels compiled one after another (region_compile_helpers 0) and in parallel (a
// helper per free core; on one core none), each from a fresh kernel cache so LLVM compiles them:
// the same installed range, every run equal to O0.
TEST_F(FusionTest, LstmCellKernelsCompiledInParallelEqualO0) {
  auto module = python(readRepoFile("examples/lstm_cell.py"));
  const char* old_dir = std::getenv("SHAPEVM_CACHE_DIR");
  const std::string kept = old_dir != nullptr ? old_dir : "";
  for (std::int64_t helpers : {3, 0}) {
    SCOPED_TRACE(fmt::format("region_compile_helpers={}", helpers));
    const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                      fmt::format("svm-region-helpers-{}-{}", static_cast<long>(::getpid()), helpers);
    std::filesystem::remove_all(dir);
    ::setenv("SHAPEVM_CACHE_DIR", dir.c_str(), 1);
    ASSERT_TRUE(Tunables::set(Tunable::RegionCompileHelpers, helpers).isOk());
    Report report;
    ASSERT_TRUE(differential(
        module, "lstm_cell", 2, [&](int, std::mt19937& rng) { return lstmInputs(rng, DType::Float32, 3, 4); },
        &report));
    expectServed(report);
    EXPECT_EQ(report.installedRanges(), 1) << report.installed();
    EXPECT_TRUE(report.describes("matmul+add, matmul+add, fused(")) << report.installed();
    // Every install reports its CPU (the compile thread's and its helpers'), split by phase, and
    // the stats' sums are the installs' sums.
    const JitStats& stats = report.stats;
    ASSERT_FALSE(stats.events.empty());
    EXPECT_EQ(stats.compile_cpu_ms.size(), stats.events.size());
    EXPECT_EQ(stats.compile_ms.size(), stats.events.size());
    double codegen = 0, plan = 0, validate = 0, tuning = 0;
    int regions = 0;
    for (const CompileEvent& e : stats.events) {
      SCOPED_TRACE(e.signature);
      codegen += e.codegen_cpu_ms;
      plan += e.shape_infer_cpu_ms;
      validate += e.validate_patch_cpu_ms;
      tuning += e.tuning_cpu_ms;
      EXPECT_GE(e.queued_ms, 0);
      EXPECT_GT(e.total_ms, 0);
      EXPECT_GE(e.validate_patch_cpu_ms, 0);
      EXPECT_LE(e.shape_infer_cpu_ms + e.codegen_cpu_ms + e.tuning_cpu_ms, e.cpu_ms + 1e-6);
      if (!e.region) continue;
      ++regions;
      EXPECT_EQ(e.kernels, 3);
      EXPECT_GT(e.shape_infer_cpu_ms, 0);  // the plan's reference run
      EXPECT_GT(e.codegen_cpu_ms, 0);      // a fresh cache: three LLVM compiles
    }
    EXPECT_EQ(regions, 1);
    EXPECT_DOUBLE_EQ(stats.codegen_cpu_ms, codegen);
    EXPECT_DOUBLE_EQ(stats.shape_infer_cpu_ms, plan);
    EXPECT_DOUBLE_EQ(stats.validate_patch_cpu_ms, validate);
    EXPECT_DOUBLE_EQ(stats.tuning_cpu_ms, tuning);
    std::filesystem::remove_all(dir);
  }
  if (old_dir != nullptr) {
    ::setenv("SHAPEVM_CACHE_DIR", kept.c_str(), 1);
  } else {
    ::unsetenv("SHAPEVM_CACHE_DIR");
  }
  EXPECT_EQ(busyCompileThreads(), 0);  // every helper counted itself busy only while it compiled
}

}  // namespace
}  // namespace shapevm::jit
