// SPDX-License-Identifier: Apache-2.0
// Helpers for the JIT's differential tests: one shared engine, specs from concrete inputs, and
// "compile this spec, run it and the reference kernel on these inputs, compare" as one assertion
// (ggml's test-backend-ops style: the declared case runs on both paths), once or for one kernel on
// many input sets, and on guard-paged copies that fault on any access outside the operands.
// Test files say `using namespace testing;` (inside shapevm::jit) to get these and the op-test
// helpers re-exported below.
#pragma once

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "../ops/op_test_util.h"
#include "jit/compiled_kernel.h"
#include "jit/kernel_abi.h"
#include "jit/llvm_cpu/llvm_cpu_backend.h"
#include "jit/validate.h"

namespace shapevm::jit::testing {

using shapevm::testing::Attrs;
using shapevm::testing::Layout;
using shapevm::testing::randomTensor;
using shapevm::testing::setAt;
using shapevm::testing::tv;
using shapevm::testing::unravel;

// A random operand (uniform in [-1, 1], never all zeros) in the given layout.
inline Value operand(DType dtype, const Shape& shape, std::mt19937& rng, Layout layout = Layout::Contiguous) {
  return Value::fromTensor(randomTensor(dtype, shape, rng, layout, 1.0));
}

// W.T for a contiguous W of shape [n, k]: a [k, n] view with strides (1, k) (the workload's B).
inline Value transposedWeight(DType dtype, std::int64_t k, std::int64_t n, std::mt19937& rng) {
  Tensor w = randomTensor(dtype, Shape{n, k}, rng, Layout::Contiguous, 1.0);
  return Value::fromTensor(w.asStrided(Shape{k, n}, Shape{1, k}, 0).value());
}

// Runs the gtest `test` (e.g. "DISABLED_Child.Name") of this test binary in a fresh process (exec,
// not a bare fork: LLVM and the thread pool must not inherit another thread's state), with
// `more_env` added to this process's environment; its exit code, or -1.
inline int runTestInChild(const std::string& test, const std::vector<std::string>& more_env = {}) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
  env.insert(env.end(), more_env.begin(), more_env.end());
  std::vector<char*> envp;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  char self[] = "/proc/self/exe";
  std::string filter_arg = "--gtest_filter=" + test;
  char also[] = "--gtest_also_run_disabled_tests";
  char* argv[] = {self, filter_arg.data(), also, nullptr};
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::execve(self, argv, envp.data());
    _exit(127);
  }
  int status = 0;
  if (pid < 0 || ::waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

// One LLVM CPU backend for the whole test binary (creating LLJIT costs ~10 ms). Its CPU is the
// host's, or $SHAPEVM_JIT_CPU's (the jit_tests_haswell ctest runs the kernel tests for haswell).
inline LlvmCpuBackend& sharedLlvmBackend() {
  static std::unique_ptr<LlvmCpuBackend> engine = [] {
    auto created = LlvmCpuBackend::create();
    if (!created) {
      ADD_FAILURE() << created.status().toString();
      std::abort();
    }
    return std::move(*created);
  }();
  return *engine;
}
inline KernelBackend& sharedBackend() {
  return sharedLlvmBackend();
}
// Its engine, for hand-built IR.
inline JitEngine& sharedEngine() {
  return sharedLlvmBackend().engine();
}

enum class Dims { Static, Symbolic };

// The spec of `op` for these inputs: all dims static, or all symbolic.
inline KernelSpec specFor(std::string_view op_name, const std::vector<Value>& inputs, const Attrs& attrs = {},
                          Dims dims = Dims::Static) {
  const OpSchema* schema = OpRegistry::global().find(op_name);
  EXPECT_NE(schema, nullptr) << op_name;
  std::vector<const Value*> pointers;
  for (const Value& v : inputs) pointers.push_back(&v);
  auto resolved = resolveAttrs(*schema, attrs);
  EXPECT_TRUE(resolved.hasValue()) << resolved.status().toString();
  KernelSpec spec = exactSpec(schema->id, *resolved, pointers);
  return dims == Dims::Symbolic ? symbolicSpec(std::move(spec)) : spec;
}

// Pointers to `values`, the form kernels and families take their inputs in.
inline std::vector<const Value*> pointersTo(const std::vector<Value>& values) {
  std::vector<const Value*> pointers;
  for (const Value& v : values) pointers.push_back(&v);
  return pointers;
}

// Expected outputs of the reference kernel for `spec`'s op and attributes.
inline Expected<std::vector<Value>> referenceOutputs(const KernelSpec& spec, const std::vector<Value>& inputs) {
  const OpSchema& schema = OpRegistry::global().schema(spec.op);
  std::vector<std::pair<std::string, AttrValue>> named;
  for (std::size_t a = 0; a < schema.attrs.size(); ++a) named.emplace_back(schema.attrs[a].name, spec.attrs[a]);
  return callOp(schema.name, inputs, named);
}

// Compiles `spec` (must be supported), runs it and the reference on `inputs`, compares with the
// dtype's tolerance (validate.h). The message names the op, the spec and the error.
inline ::testing::AssertionResult matchesReference(const KernelSpec& spec, const std::vector<Value>& inputs) {
  const KernelFamily* family = familyFor(spec.op);
  if (family == nullptr) return ::testing::AssertionFailure() << "no kernel family for " << spec.signature();
  auto kernel = compileKernel(sharedBackend(), *family, spec);
  if (!kernel) return ::testing::AssertionFailure() << spec.signature() << ": " << kernel.status().toString();
  auto expected = referenceOutputs(spec, inputs);
  if (!expected) return ::testing::AssertionFailure() << "reference failed: " << expected.status().toString();
  std::vector<const Value*> pointers = pointersTo(inputs);
  std::vector<Value> actual(static_cast<std::size_t>((*kernel)->num_outputs));
  Status run = invokeCompiled(**kernel, pointers, actual);
  if (!run.isOk()) return ::testing::AssertionFailure() << spec.signature() << ": " << run.toString();
  Comparison comparison = compareOutputs(*expected, actual);
  Status removed = sharedBackend().free((*kernel)->handle);
  if (!comparison.ok) {
    return ::testing::AssertionFailure() << spec.signature() << " on " << describeInputs(pointers) << ": "
                                         << comparison.reason;
  }
  if (!removed.isOk()) return ::testing::AssertionFailure() << removed.toString();
  return ::testing::AssertionSuccess() << "rel L2 " << comparison.rel_l2;
}

// Compiles a kernel for `spec` once, then runs it and the reference on every input set (a
// symbolic spec covers them all).
inline ::testing::AssertionResult sameKernelMatches(const KernelSpec& spec,
                                                    const std::vector<std::vector<Value>>& input_sets) {
  const KernelFamily* family = familyFor(spec.op);
  if (family == nullptr) return ::testing::AssertionFailure() << "no family for " << spec.signature();
  auto kernel = compileKernel(sharedBackend(), *family, spec);
  if (!kernel) return ::testing::AssertionFailure() << spec.signature() << ": " << kernel.status().toString();
  ::testing::AssertionResult result = ::testing::AssertionSuccess();
  for (const std::vector<Value>& inputs : input_sets) {
    std::vector<const Value*> pointers = pointersTo(inputs);
    auto expected = referenceOutputs(spec, inputs);
    if (!expected) {
      result = ::testing::AssertionFailure() << "reference failed: " << expected.status().toString();
      break;
    }
    std::vector<Value> actual(static_cast<std::size_t>((*kernel)->num_outputs));
    Status run = invokeCompiled(**kernel, pointers, actual);
    if (!run.isOk()) {
      result = ::testing::AssertionFailure()
               << spec.signature() << " on " << describeInputs(pointers) << ": " << run.toString();
      break;
    }
    Comparison comparison = compareOutputs(*expected, actual);
    if (!comparison.ok) {
      result = ::testing::AssertionFailure()
               << spec.signature() << " on " << describeInputs(pointers) << ": " << comparison.reason;
      break;
    }
  }
  EXPECT_TRUE(sharedBackend().free((*kernel)->handle).isOk());
  return result;
}

// ---- guard pages: kernels must not touch a byte outside their operands ----

namespace detail {
struct Mapping {
  void* base;
  std::size_t size;
};
inline void unmapGuarded(void* context) {
  auto* mapping = static_cast<Mapping*>(context);
  munmap(mapping->base, mapping->size);
  delete mapping;
}
}  // namespace detail

// A copy of `src` (same shape; contiguous, or stored transposed) whose bytes end right before a
// PROT_NONE page, or with `at_start` begin right after one: a kernel reading or writing past
// that end faults.
inline Tensor guardedCopy(const Tensor& src, bool at_start, bool transposed = false) {
  const Shape& shape = src.shape();
  const int rank = shape.rank();
  Shape storage_shape = shape;
  if (transposed) {
    for (int d = 0; d < rank; ++d) storage_shape[d] = shape[rank - 1 - d];
  }
  const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  const std::size_t nbytes =
      static_cast<std::size_t>(std::max<std::int64_t>(shape.numel(), 1)) * dtypeSize(src.dtype());
  const std::size_t data_pages = (nbytes + page - 1) / page;
  const std::size_t size = (data_pages + 2) * page;
  void* base = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  EXPECT_NE(base, MAP_FAILED);
  char* bytes = static_cast<char*>(base);
  EXPECT_EQ(mprotect(bytes, page, PROT_NONE), 0);
  EXPECT_EQ(mprotect(bytes + (data_pages + 1) * page, page, PROT_NONE), 0);
  char* data = at_start ? bytes + page : bytes + (data_pages + 1) * page - nbytes;
  Tensor stored = Tensor::wrap(data, src.dtype(), storage_shape, contiguousStrides(storage_shape), nbytes,
                               &detail::unmapGuarded, new detail::Mapping{base, size});
  Tensor view = stored;
  if (transposed) {
    Shape strides;
    strides.resize(rank);
    for (int d = 0; d < rank; ++d) strides[d] = stored.stride(rank - 1 - d);
    view = stored.asStrided(shape, strides, 0).value();
  }
  for (std::int64_t i = 0; i < shape.numel(); ++i) {
    const shapevm::testing::Index index = shapevm::testing::unravel(i, shape);
    shapevm::testing::setAt(view, index, shapevm::testing::at(src, index));
  }
  return view;
}

// Runs `spec`'s kernel (one output) on guarded copies of `inputs` (ending at a guard page, then
// starting at one) into a guarded, NaN-filled output (KernelArgs filled like invokeCompiled does)
// and compares with the reference.
inline ::testing::AssertionResult guardedRunMatches(const KernelSpec& spec, const std::vector<Value>& inputs,
                                                    bool transposed = false) {
  const KernelFamily* family = familyFor(spec.op);
  auto kernel = compileKernel(sharedBackend(), *family, spec);
  if (!kernel) return ::testing::AssertionFailure() << kernel.status().toString();
  auto expected = referenceOutputs(spec, inputs);
  if (!expected) return ::testing::AssertionFailure() << expected.status().toString();
  ::testing::AssertionResult result = ::testing::AssertionSuccess();
  for (bool at_start : {false, true}) {
    std::vector<Value> copies;
    for (const Value& v : inputs) copies.push_back(Value::fromTensor(guardedCopy(v.tensor(), at_start, transposed)));
    std::vector<const Value*> pointers = pointersTo(copies);
    DType dtype;
    Shape shape;
    Status status = family->outputs(spec, pointers, std::span<DType>(&dtype, 1), std::span<Shape>(&shape, 1));
    if (!status.isOk()) {
      result = ::testing::AssertionFailure() << status.toString();
      break;
    }
    Tensor poison = Tensor::empty(dtype, shape).value();
    for (std::int64_t i = 0; i < poison.numel(); ++i) {
      storeFromDouble(poison.rawData(), dtype, i, std::numeric_limits<double>::quiet_NaN());
    }
    Tensor out = guardedCopy(poison, at_start);
    KernelArgs args;
    std::memset(&args, 0, sizeof(args));
    const std::size_t n = copies.size();
    for (std::size_t i = 0; i <= n; ++i) {
      const Tensor& t = i < n ? copies[i].tensor() : out;
      args.data[i] = t.rawData();
      for (int d = 0; d < t.rank(); ++d) {
        args.shape[i][d] = t.dim(d);
        args.strides[i][d] = t.stride(d);
      }
    }
    status = family->prepare(spec, pointers, std::span<const Tensor>(&out, 1), args);
    if (!status.isOk()) {
      result = ::testing::AssertionFailure() << status.toString();
      break;
    }
    sharedBackend().launch((*kernel)->handle, args);
    std::vector<Value> actual = {Value::fromTensor(out)};
    Comparison comparison = compareOutputs(*expected, actual);
    if (!comparison.ok) {
      result = ::testing::AssertionFailure()
               << spec.signature() << (at_start ? " (at start)" : "") << ": " << comparison.reason;
      break;
    }
  }
  EXPECT_TRUE(sharedBackend().free((*kernel)->handle).isOk());
  return result;
}

// add then tanh over [?0,?1]: two elementwise kernels (O1), one fused range (O2).
inline constexpr const char* kAddTanhProgram = R"(.module "add_tanh"
.func f
  .param a : f32[?0,?1]
  .param b : f32[?0,?1]
  .outputs 1
  LoadTensor r0, a
  LoadTensor r1, b
  CallOp add r2 = r0, r1 : f32[?0,?1] x f32[?0,?1] -> f32[?0,?1]
  CallOp tanh r3 = r2 : f32[?0,?1] -> f32[?0,?1]
  StoreTensor r3, o0
  Return
.end
)";

// A dense layer with a tanh tail over rows of any count: one O2 fused range (a matmul with its
// epilogue) whose kernels' row ranges depend on the row counts a process met, and in which order.
inline constexpr const char* kDenseTanhProgram = R"(.module "dense"
.func f
  .param x : f32[?0,32]
  .param w : f32[32,48]
  .param b : f32[48]
  .outputs 1
  LoadTensor r0, x
  LoadTensor r1, w
  LoadTensor r2, b
  CallOp matmul r3 = r0, r1 : f32[?0,32] x f32[32,48] -> f32[?0,48]
  CallOp add r4 = r3, r2 : f32[?0,48] x f32[48] -> f32[?0,48]
  CallOp tanh r5 = r4 : f32[?0,48] -> f32[?0,48]
  StoreTensor r5, o0
  Return
.end
)";

}  // namespace shapevm::jit::testing
