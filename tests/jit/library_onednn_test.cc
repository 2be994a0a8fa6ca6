// SPDX-License-Identifier: Apache-2.0
// oneDNN primitives as matmul candidates (jit/llvm_cpu/library_onednn.h, KernelParams::library):
// float32/bfloat16/float16 against the reference across odd sizes, transposed and strided
// operands and post-op combinations (static kernels and one symbolic kernel over every shape),
// batched operands with broadcast batch axes, specs oneDNN cannot express refused with a reason
// and never offered, the LibraryCandidates tunable, an execution oneDNN refuses at run time
// computed by the fallback loop, and `--stats` naming loaded library kernels. A dtype this CPU's
// oneDNN has no kernel for (bf16/f16 without AVX-512) must fail the compile with oneDNN's reason;
// where it does, those cases are reported, not passed. The primitive with a generated tail
// (library = 2, "impl=onednn+tail") for epilogues post-ops cannot express and for gate programs.
// float32 through dnnl_sgemm (library = 3 "impl=sgemm", 4 "impl=sgemm+tail"): transposed and
// strided operands mapped to transa/transb/lda/ldb or refused with the reason, batched stacks
// (looped, or split across the kernel pool), the tail, gate programs and the fallback.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <random>
#include <thread>

#include "jit/fusion.h"
#include "jit/llvm_cpu/library_onednn.h"
#include "jit_test_util.h"
#include "support/cpu_cores.h"
#include "support/tunables.h"

namespace shapevm::jit {
namespace {

using namespace testing;  // jit_test_util.h

const KernelParams kLibrary{.library = 1};
const KernelParams kTail{.library = 2};
const KernelParams kSgemm{.library = 3};
const KernelParams kSgemmTail{.library = 4};

struct Case {
  std::string name;
  std::vector<Value> inputs;        // a, b, extras
  std::vector<EpilogueStep> steps;  // operands index into inputs
};

// matmul, then each step with the reference kernels.
Expected<std::vector<Value>> reference(const Case& c) {
  SVM_ASSIGN_OR_RETURN(std::vector<Value> value, callOp("matmul", {c.inputs[0], c.inputs[1]}, {}));
  for (const EpilogueStep& step : c.steps) {
    const std::string_view op = OpRegistry::global().schema(step.op).name;
    if (step.operand < 0) {
      SVM_ASSIGN_OR_RETURN(value, callOp(op, {value[0]}, {}));
    } else {
      const Value& extra = c.inputs[static_cast<std::size_t>(step.operand)];
      SVM_ASSIGN_OR_RETURN(
          value,
          callOp(op, step.swapped ? std::vector<Value>{extra, value[0]} : std::vector<Value>{value[0], extra}, {}));
    }
  }
  return value;
}

KernelSpec librarySpec(const Case& c, Dims dims = Dims::Static) {
  KernelSpec spec = exactSpec(OpId::MatMul, {}, pointersTo(c.inputs));
  if (dims == Dims::Symbolic) spec = symbolicSpec(std::move(spec));
  spec.epilogue = c.steps;
  spec.params = kLibrary;
  return spec;
}

// Runs `c` through a library kernel compiled for `spec`: 1 = matches the reference, 0 = oneDNN
// cannot create it here (the compile fails with its reason), a failure otherwise.
::testing::AssertionResult libraryMatches(const Case& c, const KernelSpec& spec, bool* created) {
  const KernelFamily* family = matmulFamily(OpId::MatMul);
  if (Status supported = family->supports(spec); !supported.isOk())
    return ::testing::AssertionFailure() << c.name << ": " << supported.message();
  auto kernel = compileKernel(sharedBackend(), *family, spec);
  std::vector<Value> actual(1);
  Status run = kernel ? invokeCompiled(**kernel, pointersTo(c.inputs), actual) : kernel.status();
  if (kernel) {
    EXPECT_TRUE(sharedBackend().free((*kernel)->handle).isOk());
  }
  if (!run.isOk()) {
    *created = false;
    if (run.message().find("oneDNN") != std::string::npos && run.code() == ErrorCode::Unsupported)
      return ::testing::AssertionSuccess() << "not created: " << run.message();
    return ::testing::AssertionFailure() << c.name << ": " << run.toString();
  }
  *created = true;
  auto expected = reference(c);
  if (!expected) return ::testing::AssertionFailure() << c.name << ": reference: " << expected.status().toString();
  Comparison comparison = compareOutputs(*expected, actual);
  if (!comparison.ok)
    return ::testing::AssertionFailure() << c.name << " " << spec.signature() << ": " << comparison.reason;
  return ::testing::AssertionSuccess();
}

std::vector<Case> cases(DType dtype, std::int64_t m, std::int64_t k, std::int64_t n, std::mt19937& rng) {
  auto a = [&](Layout layout = Layout::Contiguous) { return operand(dtype, Shape{m, k}, rng, layout); };
  auto b = [&] { return operand(dtype, Shape{k, n}, rng); };
  auto bias = [&] { return operand(dtype, Shape{n}, rng); };
  const EpilogueStep add_bias{OpId::Add, 2, false};
  return {
      {"plain", {a(), b()}, {}},
      {"B transposed", {a(), transposedWeight(dtype, k, n, rng)}, {}},
      {"A strided", {a(Layout::Strided), b()}, {}},
      {"bias relu", {a(), b(), bias()}, {add_bias, {OpId::Relu, -1, false}}},
      {"bias gelu, B transposed",
       {a(), transposedWeight(dtype, k, n, rng), bias()},
       {add_bias, {OpId::Gelu, -1, false}}},
      {"residual tanh", {a(), b(), operand(dtype, Shape{m, n}, rng)}, {{OpId::Add, 2, false}, {OpId::Tanh, -1, false}}},
      {"column mul sigmoid",
       {a(), b(), operand(dtype, Shape{m, 1}, rng)},
       {{OpId::Mul, 2, true}, {OpId::Sigmoid, -1, false}}},
      {"bias sub, silu, max",
       {a(), b(), bias(), operand(dtype, Shape{1, 1}, rng)},
       {{OpId::Sub, 2, false}, {OpId::Silu, -1, false}, {OpId::Maximum, 3, true}}},
      {"abs, div",
       {a(), b(), operand(dtype, Shape{m, n}, rng)},
       {{OpId::Abs, -1, false}, {OpId::Neg, -1, false}, {OpId::Div, 2, false}}},
  };
}

TEST(OnednnLibrary, CandidatesMatchTheReference) {
  if (!onednn::available()) GTEST_SKIP() << "LibraryCandidates=0";
  std::mt19937 rng(31);
  for (DType dtype : {DType::Float32, DType::BFloat16, DType::Float16}) {
    int created = 0, refused = 0;
    for (auto [m, k, n] : {std::tuple<std::int64_t, std::int64_t, std::int64_t>{1, 1, 1}, {7, 13, 5}, {65, 129, 33}}) {
      for (const Case& c : cases(dtype, m, k, n, rng)) {
        if (c.name.find("abs, div") != std::string::npos && dtype != DType::Float32) continue;  // |x| near 0 in 16 bits
        bool made = false;
        EXPECT_TRUE(libraryMatches(c, librarySpec(c), &made)) << dtypeName(dtype) << " " << m << "x" << k << "x" << n;
        (made ? created : refused) += 1;
      }
    }
    // Batched operands (the canonical views' batch axes, broadcast where an operand has none or 1).
    const std::int64_t m = 7, k = 13, n = 5;
    const std::vector<Case> batched = {
        {"batched A, shared B, bias",
         {operand(dtype, Shape{3, m, k}, rng), operand(dtype, Shape{k, n}, rng), operand(dtype, Shape{n}, rng)},
         {{OpId::Add, 2, false}}},
        {"batched A and B, B transposed",
         {operand(dtype, Shape{2, m, k}, rng), operand(dtype, Shape{2, k, n}, rng, Layout::Transposed)},
         {}},
        {"4-D broadcast batches, residual relu",
         {operand(dtype, Shape{2, 1, m, k}, rng), operand(dtype, Shape{1, 3, k, n}, rng),
          operand(dtype, Shape{2, 3, m, n}, rng)},
         {{OpId::Add, 2, false}, {OpId::Relu, -1, false}}},
        {"batched, per-batch column",
         {operand(dtype, Shape{4, m, k}, rng), operand(dtype, Shape{k, n}, rng), operand(dtype, Shape{4, m, 1}, rng)},
         {{OpId::Mul, 2, true}}},
    };
    for (const Case& c : batched) {
      bool made = false;
      EXPECT_TRUE(libraryMatches(c, librarySpec(c), &made)) << dtypeName(dtype) << " " << c.name;
      (made ? created : refused) += 1;
    }
    // One symbolic kernel over several shapes: a primitive per shape, created at its first call.
    Case odd{"symbolic", {}, {{OpId::Add, 2, false}, {OpId::Relu, -1, false}}};
    KernelSpec symbolic;
    for (auto [m, k, n] : {std::tuple<std::int64_t, std::int64_t, std::int64_t>{3, 17, 9}, {130, 40, 70}}) {
      odd.inputs = {operand(dtype, Shape{m, k}, rng), operand(dtype, Shape{k, n}, rng), operand(dtype, Shape{n}, rng)};
      if (symbolic.inputs.empty()) symbolic = librarySpec(odd, Dims::Symbolic);
      bool made = false;
      EXPECT_TRUE(libraryMatches(odd, symbolic, &made)) << dtypeName(dtype);
      (made ? created : refused) += 1;
    }
    if (dtype == DType::Float32) {
      EXPECT_EQ(refused, 0) << "oneDNN has a float32 matmul on every x86-64 CPU";
    } else if (refused > 0) {
      std::cout << "[ NOTE     ] oneDNN creates no " << dtypeName(dtype) << " matmul on this CPU (" << refused
                << " cases refused with its reason, " << created << " ran)\n";
    }
  }
}

// Each primitive's scratchpad is the calling thread's own buffer, not oneDNN's process-wide one:
// distinct primitives (bf16 on AMX and f32 with a transposed B need a scratchpad) running at once
// on two threads, over and over, each still matches the reference every time.
TEST(OnednnLibrary, DistinctPrimitivesRunAtOnceOnTwoThreads) {
  if (!onednn::available()) GTEST_SKIP() << "LibraryCandidates=0";
  std::mt19937 rng(37);
  const KernelFamily* family = matmulFamily(OpId::MatMul);
  struct Job {
    Case c;
    std::unique_ptr<CompiledKernel> kernel;
    std::vector<Value> want;
    int mismatches = 0;
    std::string failure;
  };
  std::vector<Job> jobs;
  for (DType dtype : {DType::BFloat16, DType::Float32}) {
    for (auto [m, k, n] : {std::tuple<std::int64_t, std::int64_t, std::int64_t>{96, 200, 72}, {64, 520, 40}}) {
      Case c{"scratch", {operand(dtype, Shape{m, k}, rng), transposedWeight(dtype, k, n, rng)}, {}};
      auto kernel = compileKernel(sharedBackend(), *family, librarySpec(c));
      if (!kernel) continue;  // no bf16 primitive on this CPU: the f32 ones still run
      auto want = reference(c);
      ASSERT_TRUE(want.hasValue()) << want.status().toString();
      jobs.push_back(Job{std::move(c), std::move(*kernel), std::move(*want)});
    }
  }
  ASSERT_GE(jobs.size(), 2u);
  // Two threads, each running every other job in turn.
  auto work = [&](std::size_t first) {
    for (int round = 0; round < 40; ++round) {
      for (std::size_t j = first; j < jobs.size(); j += 2) {
        Job& job = jobs[j];
        std::vector<Value> actual(1);
        Status run = invokeCompiled(*job.kernel, pointersTo(job.c.inputs), actual);
        Comparison comparison = run.isOk() ? compareOutputs(job.want, actual) : Comparison{false, 0.0, run.toString()};
        if (!comparison.ok && job.mismatches++ == 0) job.failure = comparison.reason;
      }
    }
  };
  std::thread other(work, 1);
  work(0);
  other.join();
  for (Job& job : jobs) {
    EXPECT_EQ(job.mismatches, 0) << job.kernel->spec.signature() << ": " << job.failure;
    EXPECT_TRUE(sharedBackend().free(job.kernel->handle).isOk());
  }
}

TEST(OnednnLibrary, InexpressibleSpecsAreRefusedAndNeverOffered) {
  const KernelFamily* family = matmulFamily(OpId::MatMul);
  std::mt19937 rng(32);
  auto a = operand(DType::Float32, Shape{8, 16}, rng);
  auto b = operand(DType::Float32, Shape{16, 24}, rng);
  auto bias = operand(DType::Float32, Shape{24}, rng);
  const std::vector<Case> refused = {
      {"erf", {a, b}, {{OpId::Erf, -1, false}}},
      {"swapped sub", {a, b, bias}, {{OpId::Sub, 2, true}}},
      {"vector", {a, operand(DType::Float32, Shape{16}, rng)}, {}},
      {"mixed dtypes", {a, operand(DType::BFloat16, Shape{16, 24}, rng)}, {}},
  };
  for (const Case& c : refused) {
    KernelSpec spec = librarySpec(c);
    const Status supported = family->supports(spec);
    EXPECT_FALSE(supported.isOk()) << c.name;
    EXPECT_NE(supported.message().find("no oneDNN matmul"), std::string::npos) << supported.message();
    spec.params = {};
    const std::vector<KernelParams> space = family->searchSpace(sharedBackend().targetSpec(spec));
    EXPECT_EQ(std::find(space.begin(), space.end(), kLibrary), space.end()) << c.name;
  }
  KernelSpec plain = librarySpec({"plain", {a, b}, {}});
  EXPECT_EQ(family->symbolStem(plain), "matmul_f32_M8_K16_N24_onednn");
  KernelSpec mixed = plain;
  mixed.params.kc = 64;
  EXPECT_FALSE(family->supports(mixed).isOk()) << "a library kernel takes no tile parameters";
  plain.params = {};
  const KernelSpec stamped = sharedBackend().targetSpec(plain);
  auto offered = [&] {
    const std::vector<KernelParams> space = family->searchSpace(stamped);
    return std::find(space.begin(), space.end(), kLibrary) != space.end();
  };
  EXPECT_EQ(offered(), onednn::available());
  const std::int64_t saved = Tunables::get(Tunable::LibraryCandidates);
  ASSERT_TRUE(Tunables::set(Tunable::LibraryCandidates, 0).isOk());
  EXPECT_FALSE(offered()) << "LibraryCandidates=0: generated kernels only";
  plain.params = kLibrary;
  EXPECT_NE(family->supports(plain).message().find("LibraryCandidates=0"), std::string::npos);
  ASSERT_TRUE(Tunables::set(Tunable::LibraryCandidates, 1).isOk());
  EXPECT_TRUE(offered());
  ASSERT_TRUE(Tunables::set(Tunable::LibraryCandidates, saved).isOk());
  EXPECT_EQ(KernelParams::parse("impl=onednn").value(), kLibrary);
  EXPECT_EQ(kLibrary.toString(), "impl=onednn");
}

TEST(OnednnLibrary, AnExecutionOneDnnRefusesIsComputedByTheFallback) {
  std::mt19937 rng(33);
  const Case c{"bias gelu",
               {operand(DType::Float32, Shape{9, 31}, rng), transposedWeight(DType::Float32, 31, 20, rng),
                operand(DType::Float32, Shape{20}, rng)},
               {{OpId::Add, 2, false}, {OpId::Gelu, -1, false}}};
  // oneDNN's OpenMP thread count on this thread is the kernel's only while it runs.
  const auto omp_threads = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "omp_get_max_threads"));
  ASSERT_NE(omp_threads, nullptr) << "libgomp comes with oneDNN";
  const int threads_before = omp_threads();
  bool made = false;
  EXPECT_TRUE(libraryMatches(c, librarySpec(c), &made));
  EXPECT_TRUE(made);
  EXPECT_EQ(omp_threads(), threads_before);

  const onednn::LibraryStats before = onednn::stats();
  onednn::failExecutionsForTesting(true);
  bool created = false;
  const ::testing::AssertionResult result = libraryMatches(c, librarySpec(c), &created);
  // The fallback loop walks broadcast batch axes too.
  const Case batched{"batched residual",
                     {operand(DType::Float32, Shape{2, 1, 5, 6}, rng), operand(DType::Float32, Shape{3, 6, 4}, rng),
                      operand(DType::Float32, Shape{3, 5, 4}, rng)},
                     {{OpId::Add, 2, false}}};
  bool batched_created = false;
  const ::testing::AssertionResult batched_result = libraryMatches(batched, librarySpec(batched), &batched_created);
  onednn::failExecutionsForTesting(false);
  EXPECT_TRUE(result);
  EXPECT_TRUE(created);
  EXPECT_TRUE(batched_result);
  EXPECT_TRUE(batched_created);
  const onednn::LibraryStats after = onednn::stats();
  EXPECT_EQ(after.run_failures, before.run_failures + 2);
  EXPECT_EQ(after.calls, before.calls + 2);
  EXPECT_GE(after.primitives, 1u);
  EXPECT_EQ(after.primitives, before.primitives + 1) << "the primitive of the first run is reused";
}

// `--stats` names the loaded library kernels (by symbol, impl=onednn) and the primitive cache;
// a freed kernel leaves the list.
TEST(OnednnLibrary, StatsNameTheLoadedLibraryKernels) {
  if (!onednn::available()) GTEST_SKIP() << "LibraryCandidates=0";
  std::mt19937 rng(35);
  const Case c{"plain", {operand(DType::Float32, Shape{7, 12}, rng), operand(DType::Float32, Shape{12, 5}, rng)}, {}};
  KernelBackend& backend = sharedBackend();
  auto kernel = compileKernel(backend, *matmulFamily(OpId::MatMul), librarySpec(c));
  ASSERT_TRUE(kernel.hasValue()) << kernel.status().toString();
  const std::string symbol = (*kernel)->handle.symbol;
  EXPECT_TRUE(onednn::isLibrarySymbol(symbol)) << symbol;
  std::string report = backend.statsReport();
  EXPECT_NE(report.find("library kernels (impl=onednn)"), std::string::npos) << report;
  EXPECT_NE(report.find(symbol), std::string::npos) << report;
  EXPECT_NE(report.find("primitives created"), std::string::npos) << report;
  ASSERT_TRUE(backend.free((*kernel)->handle).isOk());
  report = backend.statsReport();
  EXPECT_EQ(report.find(symbol), std::string::npos) << report;
}

// ---- the primitive and a generated tail (library = 2) ----

bool offers(const KernelSpec& spec, const KernelParams& params) {
  KernelSpec plain = spec;
  plain.params = {};
  const std::vector<KernelParams> space = matmulFamily(OpId::MatMul)->searchSpace(sharedBackend().targetSpec(plain));
  return std::find(space.begin(), space.end(), params) != space.end();
}

// Epilogues post-ops cannot express all of: the post-op prefix runs in oneDNN, the rest in the
// tail, in place over the output (odd N: 16-lane vectors and single columns), with transposed B,
// broadcast operands (a bias along N, a column, batch axes) and a symbolic kernel whose operands'
// stride along N is known only at run time.
TEST(OnednnLibrary, ATailFinishesEpiloguesThatAreNotAllPostOps) {
  if (!onednn::available()) GTEST_SKIP() << "LibraryCandidates=0";
  std::mt19937 rng(36);
  const DType f32 = DType::Float32;
  const std::int64_t m = 13, k = 17, n = 37;
  const std::vector<Case> tails = {
      {"erf, B transposed",
       {operand(f32, Shape{m, k}, rng), transposedWeight(f32, k, n, rng)},
       {{OpId::Erf, -1, false}}},
      {"bias, erf, column mul",
       {operand(f32, Shape{m, k}, rng), transposedWeight(f32, k, n, rng), operand(f32, Shape{n}, rng),
        operand(f32, Shape{m, 1}, rng)},
       {{OpId::Add, 2, false}, {OpId::Erf, -1, false}, {OpId::Mul, 3, true}}},
      {"bias minus the product",
       {operand(f32, Shape{m, k}, rng), operand(f32, Shape{k, n}, rng), operand(f32, Shape{n}, rng)},
       {{OpId::Sub, 2, true}, {OpId::Relu, -1, false}}},
      {"batched, broadcast B: residual, erf, bias",
       {operand(f32, Shape{2, 3, 5, 9}, rng), operand(f32, Shape{9, 19}, rng), operand(f32, Shape{2, 3, 5, 19}, rng),
        operand(f32, Shape{19}, rng)},
       {{OpId::Add, 2, false}, {OpId::Erf, -1, false}, {OpId::Div, 3, false}}},
  };
  for (const Case& c : tails) {
    KernelSpec spec = librarySpec(c);
    spec.params = kTail;
    EXPECT_EQ(onednn::postOpSteps(spec), c.steps[0].op == OpId::Add ? 1u : 0u) << c.name;
    bool made = false;
    EXPECT_TRUE(libraryMatches(c, spec, &made)) << c.name;
    EXPECT_TRUE(made) << c.name;
    EXPECT_TRUE(offers(spec, kTail)) << c.name;
    EXPECT_FALSE(offers(spec, kLibrary)) << c.name;
  }
  Case symbolic{"symbolic bias, erf", {}, {{OpId::Add, 2, false}, {OpId::Erf, -1, false}}};
  KernelSpec spec;
  for (auto [rows, cols] : {std::pair<std::int64_t, std::int64_t>{3, 21}, {11, 1}}) {
    symbolic.inputs = {operand(f32, Shape{rows, 8}, rng), operand(f32, Shape{8, cols}, rng),
                       operand(f32, Shape{cols}, rng)};
    if (spec.inputs.empty()) {
      spec = librarySpec(symbolic, Dims::Symbolic);
      spec.params = kTail;
    }
    bool made = false;
    EXPECT_TRUE(libraryMatches(symbolic, spec, &made)) << rows << "x" << cols;
  }
  // Names: the symbol, the params and the refusal of a tail where post-ops express everything.
  KernelSpec named = librarySpec(tails[0]);
  named.params = kTail;
  EXPECT_EQ(matmulFamily(OpId::MatMul)->symbolStem(named), "matmul_f32_M13_K17_N37_Bstrided_Erf_onednn_tail");
  EXPECT_EQ(KernelParams::parse("impl=onednn+tail").value(), kTail);
  EXPECT_EQ(kTail.toString(), "impl=onednn+tail");
  named.epilogue = {{OpId::Relu, -1, false}};
  EXPECT_FALSE(matmulFamily(OpId::MatMul)->supports(named).isOk()) << "relu is a post-op: impl=onednn, no tail";
  EXPECT_TRUE(offers(named, kLibrary));
  EXPECT_FALSE(offers(named, kTail));
}

// A gate epilogue as the LSTM cell's: x @ W.T + bias (a post-op; `erf` adds a step that is none),
// then over G = 4 column blocks of H: c' = sigmoid(g1) * c + sigmoid(g0) * tanh(g2) and
// h' = sigmoid(g3) * tanh(c'), c a leaf view of the iteration shape (dense, or broadcast along H).
struct GateCase {
  std::vector<Value> inputs;
  KernelSpec spec;
};
GateCase gateCase(std::mt19937& rng, const Shape& iteration, bool broadcast_c, bool erf) {
  const std::int64_t hidden = iteration[iteration.rank() - 1], k = 19;
  std::int64_t rows = 1;
  for (int d = 0; d + 1 < iteration.rank(); ++d) rows *= iteration[d];
  GateCase g;
  g.inputs = {operand(DType::Float32, Shape{rows, k}, rng), transposedWeight(DType::Float32, k, 4 * hidden, rng),
              operand(DType::Float32, Shape{4 * hidden}, rng)};
  if (broadcast_c) {
    Shape one = iteration, strides = iteration;
    one[one.rank() - 1] = 1;
    Tensor column = operand(DType::Float32, one, rng).tensor();
    for (int d = 0; d < iteration.rank(); ++d) strides[d] = column.stride(d);
    strides[strides.rank() - 1] = 0;
    g.inputs.push_back(Value::fromTensor(column.asStrided(iteration, strides, 0).value()));
  } else {
    g.inputs.push_back(operand(DType::Float32, iteration, rng));
  }
  auto program = std::make_shared<FusedProgram>();
  program->rank = iteration.rank();
  program->leaf_inner = {1, 1, 1, 1, broadcast_c ? 0 : 1};
  program->leaf_dtype.assign(5, DType::Float32);
  program->static_dims.assign(static_cast<std::size_t>(iteration.rank()), -1);
  program->divisors.assign(static_cast<std::size_t>(iteration.rank()), 1);
  auto leaf = FusedProgram::leafRef;
  program->nodes = {{OpId::Sigmoid, leaf(0), -1},
                    {OpId::Sigmoid, leaf(1), -1},
                    {OpId::Tanh, leaf(2), -1},
                    {OpId::Sigmoid, leaf(3), -1},
                    {OpId::Mul, 1, leaf(4)},
                    {OpId::Mul, 0, 2},
                    {OpId::Add, 4, 5},
                    {OpId::Tanh, 6, -1},
                    {OpId::Mul, 3, 7}};
  program->outputs = {8, 6};
  g.spec = exactSpec(OpId::MatMul, {}, pointersTo(g.inputs));
  g.spec.epilogue = {{OpId::Add, 2, false}};
  if (erf) g.spec.epilogue.push_back({OpId::Erf, -1, false});
  g.spec.fused = program;
  g.spec.fused_leaf_source = {-1, -2, -3, -4, 3};
  return g;
}

::testing::AssertionResult gateMatches(const GateCase& g, const KernelParams& params) {
  const KernelFamily* family = matmulFamily(OpId::MatMul);
  KernelSpec spec = g.spec;
  spec.params = params;
  if (Status supported = family->supports(spec); !supported.isOk())
    return ::testing::AssertionFailure() << supported.message();
  auto kernel = compileKernel(sharedBackend(), *family, spec);
  if (!kernel) return ::testing::AssertionFailure() << kernel.status().toString();
  const std::vector<const Value*> pointers = pointersTo(g.inputs);
  std::vector<Value> expected(2), actual(2);
  const Status reference = family->reference(spec, pointers, expected);
  const Status run = invokeCompiled(**kernel, pointers, actual);
  const std::string symbol = (*kernel)->handle.symbol;
  EXPECT_TRUE(sharedBackend().free((*kernel)->handle).isOk());
  if (!reference.isOk()) return ::testing::AssertionFailure() << "reference: " << reference.toString();
  if (!run.isOk()) return ::testing::AssertionFailure() << spec.signature() << ": " << run.toString();
  const Comparison comparison = compareOutputs(expected, actual);
  if (!comparison.ok) return ::testing::AssertionFailure() << spec.signature() << ": " << comparison.reason;
  return ::testing::AssertionSuccess() << symbol;
}

// The gate program runs in the tail, over the product oneDNN wrote into the thread's tail buffer:
// odd row counts, rank 2 and 3 iterations, c dense or broadcast along H, an epilogue step after
// the bias that is no post-op, 1024 rows (enough work for several tasks: the tail splits the rows
// over the kernel pool); the generated gate kernel is checked on two of them. The tail
// is what the search space offers for a gate epilogue (never the primitive alone).
TEST(OnednnLibrary, ATailRunsTheGateProgram) {
  if (!onednn::available()) GTEST_SKIP() << "LibraryCandidates=0";
  std::mt19937 rng(37);
  const onednn::LibraryStats before = onednn::stats();
  int runs = 0;
  for (const auto& [iteration, broadcast_c, erf] : {std::tuple<Shape, bool, bool>{Shape{13, 16}, false, false},
                                                    {Shape{3, 5, 32}, true, false},
                                                    {Shape{1, 16}, true, true},
                                                    {Shape{8, 128, 16}, false, true}}) {
    const GateCase g = gateCase(rng, iteration, broadcast_c, erf);
    const ::testing::AssertionResult tail = gateMatches(g, kTail);
    EXPECT_TRUE(tail) << iteration.toString();
    EXPECT_NE(std::string(tail.message()).find("_onednn_tail"), std::string::npos) << tail.message();
    if (runs < 2) {
      EXPECT_TRUE(gateMatches(g, KernelParams{})) << iteration.toString();
    }
    EXPECT_TRUE(offers(g.spec, kTail));
    EXPECT_FALSE(offers(g.spec, kLibrary));
    ++runs;
  }
  const onednn::LibraryStats after = onednn::stats();
  EXPECT_EQ(after.tail_calls, before.tail_calls + static_cast<std::uint64_t>(runs));
  EXPECT_NE(sharedBackend().statsReport().find("finished by a generated tail"), std::string::npos);
}

// oneDNN refusing the execution: the fallback loop writes the product (with the post-op prefix),
// and the tail still finishes it, for a plain epilogue and a gate program.
TEST(OnednnLibrary, ATailFinishesTheFallbackLoopsProduct) {
  if (!onednn::available()) GTEST_SKIP() << "LibraryCandidates=0";
  std::mt19937 rng(38);
  const Case c{"bias, erf",
               {operand(DType::Float32, Shape{5, 11}, rng), transposedWeight(DType::Float32, 11, 18, rng),
                operand(DType::Float32, Shape{18}, rng)},
               {{OpId::Add, 2, false}, {OpId::Erf, -1, false}}};
  KernelSpec spec = librarySpec(c);
  spec.params = kTail;
  const GateCase g = gateCase(rng, Shape{6, 16}, false, true);
  const onednn::LibraryStats before = onednn::stats();
  onednn::failExecutionsForTesting(true);
  bool made = false;
  const ::testing::AssertionResult plain = libraryMatches(c, spec, &made);
  const ::testing::AssertionResult gates = gateMatches(g, kTail);
  onednn::failExecutionsForTesting(false);
  EXPECT_TRUE(plain);
  EXPECT_TRUE(made);
  EXPECT_TRUE(gates);
  EXPECT_EQ(onednn::stats().run_failures, before.run_failures + 2);
}

// A primitive oneDNN cannot create (a 16-bit dtype its build has no kernel for on this CPU:
// float16 without AVX512-FP16, bfloat16 without AVX-512): the tail candidate fails to compile
// with oneDNN's reason; the generated kernel still takes the spec (the tuner then picks it:
// LibraryCandidates.ATailWhosePrimitiveCannotBeCreatedLoses).
TEST(OnednnLibrary, ATailWhosePrimitiveCannotBeCreatedFailsToCompile) {
  std::mt19937 rng(39);
  for (DType dtype : {DType::Float16, DType::BFloat16}) {
    const Case c{
        "erf", {operand(dtype, Shape{6, 8}, rng), operand(dtype, Shape{8, 16}, rng)}, {{OpId::Erf, -1, false}}};
    KernelSpec spec = librarySpec(c);
    spec.params = kTail;
    if (onednn::createFor(spec).isOk()) continue;
    auto kernel = compileKernel(sharedBackend(), *matmulFamily(OpId::MatMul), spec);
    ASSERT_FALSE(kernel.hasValue());
    EXPECT_NE(kernel.status().message().find("oneDNN"), std::string::npos) << kernel.status().toString();
    spec.params = {};
    EXPECT_TRUE(matmulFamily(OpId::MatMul)->supports(spec).isOk()) << "the generated kernel stays";
    return;
  }
  GTEST_SKIP() << "this CPU's oneDNN has float16 and bfloat16 matmuls";
}

// ---- dnnl_sgemm (library = 3, 4) ----

// The sgemm candidate for a case: alone without an epilogue, with the tail otherwise.
KernelSpec sgemmSpec(const Case& c, Dims dims = Dims::Static) {
  KernelSpec spec = librarySpec(c, dims);
  spec.params = c.steps.empty() ? kSgemm : kSgemmTail;
  return spec;
}

// Every case of the primitive's list in float32 (the whole epilogue in the tail), A transposed
// (transa 'T'), batched stacks with broadcast batch axes and one symbolic kernel. Operands whose
// matrices have neither unit-stride rows nor columns (every other column; a 3-D transpose, whose
// batch axis is the unit-stride one) are refused at the call with dnnl_sgemm's reason.
TEST(OnednnLibrary, SgemmCandidatesMatchTheReference) {
  if (!onednn::available()) GTEST_SKIP() << "LibraryCandidates=0";
  std::mt19937 rng(41);
  const DType f32 = DType::Float32;
  const onednn::LibraryStats before = onednn::stats();
  int ran = 0;
  auto expect = [&](const Case& c, const KernelSpec& spec, bool created) {
    bool made = false;
    const ::testing::AssertionResult result = libraryMatches(c, spec, &made);
    EXPECT_TRUE(result) << c.name;
    EXPECT_EQ(made, created) << c.name << ": " << result.message();
    if (!created) {
      EXPECT_NE(std::string(result.message()).find("dnnl_sgemm"), std::string::npos) << result.message();
    }
    ran += made ? 1 : 0;
  };
  for (auto [m, k, n] : {std::tuple<std::int64_t, std::int64_t, std::int64_t>{1, 1, 1}, {7, 13, 5}, {65, 129, 33}}) {
    for (const Case& c : cases(f32, m, k, n, rng)) {
      expect(c, sgemmSpec(c), c.name != "A strided" || k == 1);
    }
    const Case transposed{
        "A transposed", {operand(f32, Shape{m, k}, rng, Layout::Transposed), operand(f32, Shape{k, n}, rng)}, {}};
    expect(transposed, sgemmSpec(transposed), true);
  }
  const std::int64_t m = 7, k = 13, n = 5;
  const std::vector<std::pair<Case, bool>> batched = {
      {{"batched A, shared B, bias",
        {operand(f32, Shape{3, m, k}, rng), operand(f32, Shape{k, n}, rng), operand(f32, Shape{n}, rng)},
        {{OpId::Add, 2, false}}},
       true},
      {{"batched A and B, B's matrices transposed",
        {operand(f32, Shape{2, m, k}, rng),
         Value::fromTensor(
             operand(f32, Shape{2, n, k}, rng).tensor().asStrided(Shape{2, k, n}, Shape{n * k, 1, k}, 0).value())},
        {}},
       true},
      {{"3-D transpose: refused",
        {operand(f32, Shape{2, m, k}, rng), operand(f32, Shape{2, k, n}, rng, Layout::Transposed)},
        {}},
       false},
      {{"4-D broadcast batches, residual relu",
        {operand(f32, Shape{2, 1, m, k}, rng), operand(f32, Shape{1, 3, k, n}, rng),
         operand(f32, Shape{2, 3, m, n}, rng)},
        {{OpId::Add, 2, false}, {OpId::Relu, -1, false}}},
       true},
      // 32 matrices of 64^3: enough work for several tasks, so the stack is split across the pool.
      {{"a stack split across tasks", {operand(f32, Shape{32, 64, 64}, rng), operand(f32, Shape{32, 64, 64}, rng)}, {}},
       true},
  };
  for (const auto& [c, created] : batched) expect(c, sgemmSpec(c), created);
  Case odd{"symbolic", {}, {{OpId::Add, 2, false}, {OpId::Erf, -1, false}}};
  KernelSpec symbolic;
  for (auto [m, k, n] : {std::tuple<std::int64_t, std::int64_t, std::int64_t>{3, 17, 9}, {130, 40, 70}}) {
    odd.inputs = {operand(f32, Shape{m, k}, rng), operand(f32, Shape{k, n}, rng), operand(f32, Shape{n}, rng)};
    if (symbolic.inputs.empty()) symbolic = sgemmSpec(odd, Dims::Symbolic);
    expect(odd, symbolic, true);
  }
  EXPECT_EQ(onednn::stats().sgemm_calls, before.sgemm_calls + static_cast<std::uint64_t>(ran));
}

// Offered for float32 next to the primitive (alone without an epilogue, with a tail otherwise,
// a gate program included), never for 16-bit dtypes or with LibraryCandidates=0; names.
TEST(OnednnLibrary, SgemmIsOfferedForFloat32AndNamed) {
  std::mt19937 rng(42);
  const Case plain{
      "plain", {operand(DType::Float32, Shape{8, 16}, rng), operand(DType::Float32, Shape{16, 24}, rng)}, {}};
  Case relu = plain;
  relu.steps = {{OpId::Relu, -1, false}};
  const Case bf16{
      "bf16", {operand(DType::BFloat16, Shape{8, 16}, rng), operand(DType::BFloat16, Shape{16, 24}, rng)}, {}};
  const GateCase g = gateCase(rng, Shape{5, 16}, false, false);
  const bool on = onednn::available();
  EXPECT_EQ(offers(librarySpec(plain), kSgemm), on);
  EXPECT_FALSE(offers(librarySpec(plain), kSgemmTail));
  EXPECT_EQ(offers(librarySpec(relu), kSgemmTail), on);
  EXPECT_EQ(offers(librarySpec(relu), kLibrary), on) << "the primitive stays";
  EXPECT_FALSE(offers(librarySpec(relu), kSgemm)) << "sgemm has no post-ops";
  EXPECT_EQ(offers(g.spec, kSgemmTail), on);
  EXPECT_FALSE(offers(librarySpec(bf16), kSgemm));
  KernelSpec refused = librarySpec(bf16);
  refused.params = kSgemm;
  if (on) {
    EXPECT_NE(matmulFamily(OpId::MatMul)->supports(refused).message().find("float32"), std::string::npos);
  }
  const std::int64_t saved = Tunables::get(Tunable::LibraryCandidates);
  ASSERT_TRUE(Tunables::set(Tunable::LibraryCandidates, 0).isOk());
  EXPECT_FALSE(offers(librarySpec(plain), kSgemm));
  ASSERT_TRUE(Tunables::set(Tunable::LibraryCandidates, saved).isOk());
  EXPECT_EQ(matmulFamily(OpId::MatMul)->symbolStem(sgemmSpec(plain)), "matmul_f32_M8_K16_N24_onednn_sgemm");
  EXPECT_EQ(matmulFamily(OpId::MatMul)->symbolStem(sgemmSpec(relu)), "matmul_f32_M8_K16_N24_Relu_onednn_sgemm_tail");
  EXPECT_TRUE(onednn::isLibrarySymbol("matmul_f32_M8_K16_N24_onednn_sgemm"));
  EXPECT_EQ(KernelParams::parse("impl=sgemm").value(), kSgemm);
  EXPECT_EQ(KernelParams::parse("impl=sgemm+tail").value(), kSgemmTail);
  EXPECT_EQ(kSgemm.toString(), "impl=sgemm");
  EXPECT_EQ(kSgemmTail.toString(), "impl=sgemm+tail");
}

// The gate program after sgemm (its product in the tail buffer), and sgemm refusing at run time:
// the fallback loop writes the product and the tail still finishes it (plain, epilogue, gates).
TEST(OnednnLibrary, SgemmWithATailRunsTheGateProgramAndFallsBack) {
  if (!onednn::available()) GTEST_SKIP() << "LibraryCandidates=0";
  std::mt19937 rng(43);
  for (const auto& [iteration, broadcast_c, erf] :
       {std::tuple<Shape, bool, bool>{Shape{13, 16}, false, false}, {Shape{3, 5, 32}, true, true}}) {
    const GateCase g = gateCase(rng, iteration, broadcast_c, erf);
    const ::testing::AssertionResult tail = gateMatches(g, kSgemmTail);
    EXPECT_TRUE(tail) << iteration.toString();
    EXPECT_NE(std::string(tail.message()).find("_onednn_sgemm_tail"), std::string::npos) << tail.message();
  }
  const Case plain{
      "plain", {operand(DType::Float32, Shape{9, 31}, rng), transposedWeight(DType::Float32, 31, 20, rng)}, {}};
  const Case erf{"bias, erf",
                 {operand(DType::Float32, Shape{5, 11}, rng), transposedWeight(DType::Float32, 11, 18, rng),
                  operand(DType::Float32, Shape{18}, rng)},
                 {{OpId::Add, 2, false}, {OpId::Erf, -1, false}}};
  const GateCase g = gateCase(rng, Shape{6, 16}, false, true);
  const onednn::LibraryStats before = onednn::stats();
  onednn::failExecutionsForTesting(true);
  bool plain_made = false, erf_made = false;
  const ::testing::AssertionResult plain_result = libraryMatches(plain, sgemmSpec(plain), &plain_made);
  const ::testing::AssertionResult erf_result = libraryMatches(erf, sgemmSpec(erf), &erf_made);
  const ::testing::AssertionResult gates = gateMatches(g, kSgemmTail);
  onednn::failExecutionsForTesting(false);
  EXPECT_TRUE(plain_result);
  EXPECT_TRUE(plain_made);
  EXPECT_TRUE(erf_result);
  EXPECT_TRUE(erf_made);
  EXPECT_TRUE(gates);
  const onednn::LibraryStats after = onednn::stats();
  EXPECT_EQ(after.run_failures, before.run_failures + 3);
  EXPECT_EQ(after.sgemm_calls, before.sgemm_calls + 3);
}

// ---- B packed once (onednn::packedB) ----

// A tunable set for the scope, then restored.
class ScopedTunable {
 public:
  ScopedTunable(Tunable tunable, std::int64_t value) : tunable_(tunable), saved_(Tunables::get(tunable)) {
    EXPECT_TRUE(Tunables::set(tunable, value).isOk());
  }
  ~ScopedTunable() { (void)Tunables::set(tunable_, saved_); }
  ScopedTunable(const ScopedTunable&) = delete;
  ScopedTunable& operator=(const ScopedTunable&) = delete;

 private:
  Tunable tunable_;
  std::int64_t saved_;
};

// A primitive's B that is a weight (owned, the same tensor call after call) is reordered once into
// oneDNN's layout and read packed by later calls, in float32 and bfloat16; a new weight tensor
// is packed afresh (the old packing is never read for it), and external memory changed in place
// between calls is never packed. Results match the reference throughout.
// A dynamic-M library kernel creates its primitive at the first call on each new M, on the
// calling thread; the backend counts that time as library codegen (an install moves what its
// validation spent of it from validation to codegen). A repeated shape creates nothing.
TEST(OnednnLibrary, PrimitivesCreatedAtACallCountAsTheThreadsLibraryCodegen) {
  if (!onednn::available()) GTEST_SKIP() << "LibraryCandidates=0";
  std::mt19937 rng(72);
  const std::int64_t k = 72, n = 40;
  const Value b = operand(DType::Float32, Shape{k, n}, rng);
  const Case first{"plain", {operand(DType::Float32, Shape{29, k}, rng), b}, {}};
  auto kernel = compileKernel(sharedBackend(), *matmulFamily(OpId::MatMul), librarySpec(first, Dims::Symbolic));
  ASSERT_TRUE(kernel.hasValue()) << kernel.status().toString();
  const auto call = [&](std::int64_t m) {
    const std::vector<Value> inputs = {operand(DType::Float32, Shape{m, k}, rng), b};
    std::vector<Value> actual(1);
    const double before = sharedBackend().threadLibraryCodegenMs();
    EXPECT_TRUE(invokeCompiled(**kernel, pointersTo(inputs), actual).isOk());
    auto expected = callOp("matmul", {inputs[0], inputs[1]}, {});
    EXPECT_TRUE(expected.hasValue() && compareOutputs(*expected, actual).ok) << "m = " << m;
    return sharedBackend().threadLibraryCodegenMs() - before;
  };
  // An M no other test uses: its primitive is new to the process-wide cache.
  const std::int64_t m = 1000 + static_cast<std::int64_t>(rng() % 500);
  EXPECT_GT(call(m), 0.0) << "the first call on a new M creates a primitive";
  EXPECT_EQ(call(m), 0.0) << "the same M again finds it";
  EXPECT_TRUE(sharedBackend().free((*kernel)->handle).isOk());
}

TEST(OnednnLibrary, APackedBIsReadUntilTheWeightChanges) {
  if (!onednn::available()) GTEST_SKIP() << "LibraryCandidates=0";
  // Run alone (as ctest runs it) the cache is empty; after other tests it may hold too many.
  if (onednn::stats().primitives + 8 >= onednn::kMaxPrimitives / 2)
    GTEST_SKIP() << "the primitive cache is half full: no packed-B primitives are made";
  const ScopedTunable entries(Tunable::PackedWeightEntries, 2);
  const ScopedTunable min_elements(Tunable::PackedWeightMinElements, 1024);
  std::mt19937 rng(71);
  const std::int64_t m = 37, k = 96, n = 80;
  for (const DType dtype : {DType::Float32, DType::BFloat16}) {
    SCOPED_TRACE(dtypeName(dtype));
    const Value a = operand(dtype, Shape{m, k}, rng);
    const Value bias = operand(dtype, Shape{n}, rng);
    const std::vector<EpilogueStep> steps = {{OpId::Add, 2, false}, {OpId::Relu, -1, false}};
    const Case first{"W.T", {a, transposedWeight(dtype, k, n, rng), bias}, steps};
    const Case other{"another W.T", {a, transposedWeight(dtype, k, n, rng), bias}, steps};
    auto kernel = compileKernel(sharedBackend(), *matmulFamily(OpId::MatMul), librarySpec(first));
    if (!kernel && kernel.status().message().find("oneDNN") != std::string::npos) {
      EXPECT_NE(dtype, DType::Float32) << kernel.status().toString();
      continue;  // no bf16 primitive on this CPU
    }
    ASSERT_TRUE(kernel.hasValue()) << kernel.status().toString();
    auto run = [&](const Case& c) {
      std::vector<Value> actual(1);
      ASSERT_TRUE(invokeCompiled(**kernel, pointersTo(c.inputs), actual).isOk());
      auto expected = reference(c);
      ASSERT_TRUE(expected.hasValue());
      const Comparison comparison = compareOutputs(*expected, actual);
      EXPECT_TRUE(comparison.ok) << c.name << ": " << comparison.reason;
    };
    const onednn::LibraryStats before = onednn::stats();
    run(first);
    run(first);
    run(first);
    const onednn::LibraryStats packed = onednn::stats();
    if (packed.b_packs == before.b_packs) {
      // oneDNN reads this B where it is (its chosen layout is B's own): nothing to pack.
      EXPECT_FALSE(__builtin_cpu_supports("avx512f")) << "an AVX-512 host's primitive chooses a blocked B";
      EXPECT_TRUE(sharedBackend().free((*kernel)->handle).isOk());
      continue;
    }
    EXPECT_EQ(packed.b_packs, before.b_packs + 1) << "one packing for three calls";
    EXPECT_EQ(packed.packed_calls, before.packed_calls + 3);
    EXPECT_EQ(packed.calls, before.calls + 3) << "packing computes nothing";
    run(other);  // a new weight: packed afresh
    run(first);  // still cached
    const onednn::LibraryStats changed = onednn::stats();
    EXPECT_EQ(changed.b_packs, packed.b_packs + 1);
    EXPECT_EQ(changed.packed_calls, packed.packed_calls + 2);
    EXPECT_EQ((*kernel)->packed.stats().packs, 2u);

    // External memory changed in place between calls: read where it is, every call.
    const Tensor& w = first.inputs[1].tensor();
    std::vector<std::byte> bytes(static_cast<std::size_t>(w.storage()->nbytes()));
    std::memcpy(bytes.data(), w.storage()->data(), bytes.size());
    Tensor wrapped = Tensor::wrap(bytes.data(), dtype, w.shape(), w.strides(), bytes.size(), nullptr, nullptr);
    const Case external{"external W.T", {a, Value::fromTensor(wrapped), bias}, steps};
    const std::uint64_t packs = (*kernel)->packed.stats().packs;
    run(external);
    const Case changed_external{"external W.T changed", {a, Value::fromTensor(wrapped), bias}, steps};
    const Tensor& new_w = other.inputs[1].tensor();  // the same layout: the owner writes its values
    ASSERT_EQ(new_w.storage()->nbytes(), bytes.size());
    std::memcpy(bytes.data(), new_w.storage()->data(), bytes.size());
    run(changed_external);
    EXPECT_EQ((*kernel)->packed.stats().packs, packs) << "external memory is never packed";
    EXPECT_EQ(onednn::stats().packed_calls, changed.packed_calls);
    EXPECT_TRUE(sharedBackend().free((*kernel)->handle).isOk());
  }
}

// A call on one task (validation's: KernelThreadsOnThisThread(1)) that packs B runs its packing
// on that task too: the packed-B twin's reorder is made for the problem's task count, not for the
// OpenMP default, so the calling thread starts no OpenMP team (whose barrier a busy host makes
// the caller spin on). Counted as the process's threads, on a fresh thread (no team of its own
// yet), around the first calls; the products match the reference.
TEST(OnednnLibrary, AOneTaskCallPacksBWithoutStartingAnOpenMpTeam) {
  if (!onednn::available()) GTEST_SKIP() << "LibraryCandidates=0";
  if (onednn::stats().primitives + 8 >= onednn::kMaxPrimitives / 2)
    GTEST_SKIP() << "the primitive cache is half full: no packed-B primitives are made";
  const auto omp_threads = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "omp_get_max_threads"));
  ASSERT_NE(omp_threads, nullptr) << "libgomp comes with oneDNN";
  if (omp_threads() < 2) GTEST_SKIP() << "OpenMP runs one thread here: no team to start";
  const ScopedTunable entries(Tunable::PackedWeightEntries, 2);
  const ScopedTunable min_elements(Tunable::PackedWeightMinElements, 1024);
  std::mt19937 rng(73);
  // Sizes no other test uses: the primitives and their twin are new to the process-wide cache.
  const std::int64_t m = 23, k = 128 + static_cast<std::int64_t>(rng() % 64), n = 1024;
  const Case c{"W.T", {operand(DType::Float32, Shape{m, k}, rng), transposedWeight(DType::Float32, k, n, rng)}, {}};
  auto kernel = compileKernel(sharedBackend(), *matmulFamily(OpId::MatMul), librarySpec(c));
  ASSERT_TRUE(kernel.hasValue()) << kernel.status().toString();
  const auto process_threads = [] {
    std::size_t count = 0;
    for (const auto& entry : std::filesystem::directory_iterator("/proc/self/task")) count += entry.exists() ? 1 : 0;
    return count;
  };
  const onednn::LibraryStats before = onednn::stats();
  std::size_t threads_before = 0, threads_after = 0;
  std::thread caller([&] {
    const KernelThreadsOnThisThread one(1);
    threads_before = process_threads();
    for (int call = 0; call < 2; ++call) {
      std::vector<Value> actual(1);
      ASSERT_TRUE(invokeCompiled(**kernel, pointersTo(c.inputs), actual).isOk());
      auto expected = reference(c);
      ASSERT_TRUE(expected.hasValue());
      const Comparison comparison = compareOutputs(*expected, actual);
      EXPECT_TRUE(comparison.ok) << "call " << call << ": " << comparison.reason;
    }
    threads_after = process_threads();
  });
  caller.join();
  const onednn::LibraryStats after = onednn::stats();
  if (after.b_packs == before.b_packs) {
    EXPECT_FALSE(__builtin_cpu_supports("avx512f")) << "an AVX-512 host's primitive chooses a blocked B";
  } else {
    EXPECT_EQ(after.packed_calls, before.packed_calls + 2) << "packed once, read by both calls";
  }
  EXPECT_EQ(threads_after, threads_before) << "a one-task call started OpenMP threads";
  EXPECT_TRUE(sharedBackend().free((*kernel)->handle).isOk());
}

// prepareCall() reuses the calling thread's record of a call on the same layouts (spec, canonical
// views, output and epilogue strides, task count): every call after a program's first skips
// making the Problem. A call on a new shape, new strides or new data, and one back on the first
// layout, must each still compute its own product (a record keyed too loosely would run a
// primitive made for another shape or stride), and repeated layouts must be served by the record.
TEST(OnednnLibrary, APreparedCallIsReusedOnlyForTheSameLayouts) {
  if (!onednn::available()) GTEST_SKIP() << "LibraryCandidates=0";
  std::mt19937 rng(83);
  const DType dtype = DType::Float32;
  const std::vector<EpilogueStep> steps = {{OpId::Add, 2, false}, {OpId::Relu, -1, false}};
  for (const KernelParams& params : {kLibrary, kSgemmTail}) {
    SCOPED_TRACE(params.toString());
    // A's rows k + 7 elements apart (a column slice: sgemm's lda takes it too).
    auto rowsApart = [&](std::int64_t m, std::int64_t k) {
      const Tensor wide = operand(dtype, Shape{m, k + 7}, rng).tensor();
      return Value::fromTensor(wide.asStrided(Shape{m, k}, Shape{k + 7, 1}, 0).value());
    };
    auto make = [&](std::int64_t m, std::int64_t k, std::int64_t n, Layout a_layout, bool b_transposed) {
      Value b = b_transposed ? transposedWeight(dtype, k, n, rng) : operand(dtype, Shape{k, n}, rng);
      return Case{fmt::format("{}x{}x{} A {} B {}", m, k, n, a_layout == Layout::Strided ? "strided" : "dense",
                              b_transposed ? "transposed" : "dense"),
                  {a_layout == Layout::Strided ? rowsApart(m, k) : operand(dtype, Shape{m, k}, rng), std::move(b),
                   operand(dtype, Shape{n}, rng)},
                  steps};
    };
    // Built from a strided A and a transposed B: the kernel takes any strides.
    KernelSpec spec = librarySpec(make(9, 20, 12, Layout::Strided, true), Dims::Symbolic);
    spec.params = params;
    auto kernel = compileKernel(sharedBackend(), *matmulFamily(OpId::MatMul), spec);
    ASSERT_TRUE(kernel.hasValue()) << kernel.status().toString();
    auto run = [&](const Case& c) {
      std::vector<Value> actual(1);
      const Status status = invokeCompiled(**kernel, pointersTo(c.inputs), actual);
      ASSERT_TRUE(status.isOk()) << c.name << ": " << status.toString();
      auto expected = reference(c);
      ASSERT_TRUE(expected.hasValue());
      const Comparison comparison = compareOutputs(*expected, actual);
      EXPECT_TRUE(comparison.ok) << c.name << ": " << comparison.reason;
    };
    auto hits = [] { return onednn::stats().prepare_hits; };
    const std::uint64_t start = hits();
    for (int call = 0; call < 3; ++call) run(make(9, 20, 12, Layout::Strided, true));  // new data each call
    EXPECT_GE(hits(), start + 2) << "the same layouts again: served by the thread's record";
    run(make(9, 20, 12, Layout::Contiguous, true));  // A's row stride changes
    run(make(9, 20, 12, Layout::Strided, false));    // B's strides change
    run(make(33, 20, 12, Layout::Strided, true));    // M changes
    run(make(9, 24, 16, Layout::Strided, true));     // K and N change
    const std::uint64_t before_back = hits();
    run(make(9, 20, 12, Layout::Strided, true));  // the first layout again, new data
    EXPECT_EQ(hits(), before_back + 1);
    EXPECT_TRUE(sharedBackend().free((*kernel)->handle).isOk());
  }
}

}  // namespace
}  // namespace shapevm::jit
