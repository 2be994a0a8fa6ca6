// SPDX-License-Identifier: Apache-2.0
// Per-op interpreter overhead: a function of 100 straight-line `CallOp add` instructions run
// through the VM, reported as ns per CallOp, on 1-element and 64x64 float32 tensors, with
// profiling on (the default) and off. bench/op_overhead.py runs this next to PyTorch eager.
#include <benchmark/benchmark.h>

#include <string>

#include "bytecode/text_format.h"
#include "bytecode/verifier.h"
#include "vm/vm.h"

namespace shapevm {
namespace {

constexpr int kOpsPerRun = 100;

std::shared_ptr<Module> chainModule() {
  std::string text = ".module \"overhead\"\n.func chain\n  .param a : f32[*]\n  .param b : f32[*]\n  .outputs 1\n";
  text += "  LoadTensor r0, a\n  LoadTensor r1, b\n";
  for (int i = 0; i < kOpsPerRun; ++i) text += "  CallOp add r2 = r0, r1\n";
  text += "  StoreTensor r2, o0\n  Return\n.end\n";
  auto module = assemble(text, "overhead.svasm");
  if (!module || !verifyModule(*module).isOk()) return nullptr;
  return std::make_shared<Module>(std::move(*module));
}

void benchAdd(benchmark::State& state, Shape shape, bool profile) {
  auto module = chainModule();
  if (!module) {
    state.SkipWithError("could not assemble the benchmark module");
    return;
  }
  VmOptions options;
  options.profile = profile;
  VirtualMachine vm(module, options);
  Tensor a = std::move(Tensor::empty(DType::Float32, shape).value());
  Tensor b = std::move(Tensor::empty(DType::Float32, shape).value());
  for (std::int64_t i = 0; i < a.numel(); ++i) {
    a.data<float>()[i] = 0.5f + static_cast<float>(i % 7);
    b.data<float>()[i] = 1.25f - static_cast<float>(i % 5);
  }
  std::vector<Value> args{Value::fromTensor(a), Value::fromTensor(b)};
  for (auto _ : state) {
    auto out = vm.run(0, args);
    benchmark::DoNotOptimize(out);
  }
  state.SetItemsProcessed(state.iterations() * kOpsPerRun);
}

BENCHMARK_CAPTURE(benchAdd, add_1elem_profiled, Shape{1}, true);
BENCHMARK_CAPTURE(benchAdd, add_1elem_unprofiled, Shape{1}, false);
BENCHMARK_CAPTURE(benchAdd, add_64x64_profiled, Shape{64, 64}, true);
BENCHMARK_CAPTURE(benchAdd, add_64x64_unprofiled, Shape{64, 64}, false);

}  // namespace
}  // namespace shapevm

BENCHMARK_MAIN();
