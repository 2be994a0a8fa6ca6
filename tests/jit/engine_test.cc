// SPDX-License-Identifier: Apache-2.0
// JitEngine: host CPU detection, compiling a hand-built kernel, calling it, removing it.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <thread>

#include <unistd.h>

#include "jit/llvm_cpu/codegen_util.h"
#include "jit/llvm_cpu/engine.h"
#include "support/tunables.h"

// gdb's JIT interface (GDB manual, "JIT Compilation Interface"), defined by LLVM's JIT loader.
extern "C" {
struct JitCodeEntry {
  JitCodeEntry* next;
  JitCodeEntry* prev;
  const char* symfile;
  std::uint64_t size;
};
struct JitDescriptor {
  std::uint32_t version;
  std::uint32_t action;
  JitCodeEntry* relevant;
  JitCodeEntry* first;
};
extern JitDescriptor __jit_debug_descriptor;
}

namespace shapevm::jit {
namespace {

// out[i] = in[i] * 2 + 1 over args.shape[0][0] elements of float32.
Status emitAxpy(llvm::Module& module, const std::string& symbol) {
  ir::Builder b(module.getContext());
  llvm::Function* fn = ir::beginKernel(module, symbol, b);
  ir::ArgsView args(b, fn->getArg(0));
  llvm::Value* in = args.data(0);
  llvm::Value* out = args.data(1);
  llvm::Value* n = args.dim(0, 0);
  ir::emitLoop(b, b.getInt64(0), n, 1, [&](llvm::Value* i) {
    llvm::Value* x = ir::loadCompute(b, DType::Float32, ir::elementPtr(b, DType::Float32, in, i));
    llvm::Value* y = b.CreateFAdd(b.CreateFMul(x, llvm::ConstantFP::get(b.getFloatTy(), 2.0)),
                                  llvm::ConstantFP::get(b.getFloatTy(), 1.0));
    ir::storeCompute(b, DType::Float32, y, ir::elementPtr(b, DType::Float32, out, i));
  });
  b.CreateRetVoid();
  return Status::ok();
}

// Calls an emitAxpy kernel on `n` elements and checks every output.
void expectAxpy(const KernelHandle& handle, std::size_t n, const std::string& what) {
  std::vector<float> in(n), out(n, -7.0f);
  for (std::size_t i = 0; i < n; ++i) in[i] = 0.5f * static_cast<float>(i) - 3.0f;
  KernelArgs args{};
  args.data[0] = in.data();
  args.data[1] = out.data();
  args.shape[0][0] = static_cast<std::int64_t>(n);
  reinterpret_cast<GeneratedKernelFn>(handle.address)(&args);
  for (std::size_t i = 0; i < n; ++i) EXPECT_FLOAT_EQ(out[i], in[i] * 2 + 1) << what << " element " << i;
}

TEST(JitEngine, CompilesCallsAndRemovesAKernel) {
  auto engine = JitEngine::create();
  ASSERT_TRUE(engine.hasValue()) << engine.status().toString();
  EXPECT_FALSE((*engine)->cpuName().empty());
  auto handle = (*engine)->compile("svm_test_axpy", [](llvm::Module& m) { return emitAxpy(m, "svm_test_axpy"); });
  ASSERT_TRUE(handle.hasValue()) << handle.status().toString();
  EXPECT_EQ(handle->symbol, "svm_test_axpy");
  EXPECT_EQ((*engine)->liveKernels(), 1u);
  expectAxpy(*handle, 37, "");
  ASSERT_TRUE((*engine)->remove(*handle).isOk());
  EXPECT_EQ((*engine)->liveKernels(), 0u);
  EXPECT_FALSE((*engine)->remove(*handle).isOk());  // already removed: an error, not a crash
}

// Every backend level (jit_codegen_level) gives a correct kernel, and each level (and IR pipeline)
// has its own code identity, so a kernel cache never mixes objects built under two of them.
TEST(JitEngine, EveryCodegenLevelGivesACorrectKernelAndItsOwnIdentity) {
  auto engine = JitEngine::create();
  ASSERT_TRUE(engine.hasValue()) << engine.status().toString();
  const std::int64_t saved = Tunables::get(Tunable::JitCodegenLevel);
  std::set<std::string> identities;
  for (std::int64_t level = 0; level <= 3; ++level) {
    ASSERT_TRUE(Tunables::set(Tunable::JitCodegenLevel, level).isOk());
    identities.insert((*engine)->codeIdentity());
    const std::uint64_t before = (*engine)->codegens();
    auto handle = (*engine)->compile("svm_test_level", [](llvm::Module& m) { return emitAxpy(m, "svm_test_level"); });
    ASSERT_TRUE(handle.hasValue()) << "level " << level << ": " << handle.status().toString();
    EXPECT_EQ((*engine)->codegens(), before + 1);
    expectAxpy(*handle, 45, "level " + std::to_string(level));
    ASSERT_TRUE((*engine)->remove(*handle).isOk());
  }
  ASSERT_TRUE(Tunables::set(Tunable::JitCodegenLevel, saved).isOk());
  EXPECT_EQ(identities.size(), 4u);
  // The IR pipeline (jit_opt_pipeline) is part of the identity too.
  const std::int64_t pipeline = Tunables::get(Tunable::JitOptPipeline);
  ASSERT_TRUE(Tunables::set(Tunable::JitOptPipeline, 1 - pipeline).isOk());
  identities.insert((*engine)->codeIdentity());
  ASSERT_TRUE(Tunables::set(Tunable::JitOptPipeline, pipeline).isOk());
  EXPECT_EQ(identities.size(), 5u);
}

TEST(JitEngine, InvalidIrIsAnErrorNotACrash) {
  auto engine = JitEngine::create();
  ASSERT_TRUE(engine.hasValue());
  auto handle = (*engine)->compile("svm_bad", [](llvm::Module& module) {
    ir::Builder b(module.getContext());
    ir::beginKernel(module, "svm_bad", b);  // no terminator: invalid
    return Status::ok();
  });
  ASSERT_FALSE(handle.hasValue());
  EXPECT_NE(handle.status().toString().find("invalid"), std::string::npos) << handle.status().toString();
  auto missing = (*engine)->compile("svm_missing", [](llvm::Module&) { return Status::ok(); });
  EXPECT_FALSE(missing.hasValue());
}

TEST(JitEngine, TwoVersionsOfOneSymbolCoexist) {
  auto engine = JitEngine::create();
  ASSERT_TRUE(engine.hasValue());
  auto a = (*engine)->compile("svm_same", [](llvm::Module& m) { return emitAxpy(m, "svm_same"); });
  auto b = (*engine)->compile("svm_same", [](llvm::Module& m) { return emitAxpy(m, "svm_same"); });
  ASSERT_TRUE(a.hasValue() && b.hasValue());
  EXPECT_EQ(a->symbol, b->symbol) << "one symbol, two versions (each in its own JITDylib)";
  EXPECT_NE(a->id, b->id);
  EXPECT_NE(a->address, b->address);
  ASSERT_TRUE((*engine)->remove(*a).isOk());
  std::vector<float> in = {1, 2, 3}, out(3);
  KernelArgs args{};
  args.data[0] = in.data();
  args.data[1] = out.data();
  args.shape[0][0] = 3;
  reinterpret_cast<GeneratedKernelFn>(b->address)(&args);  // b survives a's removal
  EXPECT_FLOAT_EQ(out[2], 7.0f);
}

TEST(JitEngine, KernelsAreRegisteredWithGdb) {
  EngineOptions options;
  options.debugger_support = true;
  auto engine = JitEngine::create(options);
  ASSERT_TRUE(engine.hasValue());
  auto handle = (*engine)->compile("svm_gdb_visible", [](llvm::Module& m) { return emitAxpy(m, "svm_gdb_visible"); });
  ASSERT_TRUE(handle.hasValue()) << handle.status().toString();
  // The object file gdb reads is in the descriptor's list, with the readable symbol in it.
  bool found = false;
  for (JitCodeEntry* entry = __jit_debug_descriptor.first; entry != nullptr && !found; entry = entry->next) {
    std::string_view object(entry->symfile, entry->size);
    found = object.find(handle->symbol) != std::string_view::npos;
  }
  EXPECT_TRUE(found) << handle->symbol << " is not in any object registered with gdb";
}

TEST(JitEngine, PerfSupportWritesAJitdumpWithTheKernelNames) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("svm_jitdump_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  ::setenv("JITDUMPDIR", dir.c_str(), 1);
  {
    EngineOptions options;
    options.perf_support = true;
    auto engine = JitEngine::create(options);
    ASSERT_TRUE(engine.hasValue()) << engine.status().toString();
    auto handle = (*engine)->compile("svm_perf_visible", [](llvm::Module& m) { return emitAxpy(m, "svm_perf_visible"); });
    ASSERT_TRUE(handle.hasValue());
  }
  ::unsetenv("JITDUMPDIR");
  std::string contents;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir)) {
    if (entry.path().extension() != ".dump") continue;
    std::ifstream in(entry.path(), std::ios::binary);
    contents.append(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  std::filesystem::remove_all(dir);
  EXPECT_NE(contents.find("svm_perf_visible"), std::string::npos) << "no jitdump with the kernel's name";
}

// Kernels built, compiled and linked on four threads at once (a region's kernels compile in
// parallel): each is correct, half of them through the hand-vectorized pipeline (markHandVectorized).
// Under TSan this also checks that no two threads share a target machine.
TEST(JitEngine, BuildsAndLinksOnSeveralThreadsAtOnce) {
  auto engine = JitEngine::create();
  ASSERT_TRUE(engine.hasValue()) << engine.status().toString();
  const std::uint64_t before = (*engine)->codegens();
  constexpr int kThreads = 4;
  std::vector<Expected<KernelHandle>> handles;
  for (int t = 0; t < kThreads; ++t) handles.emplace_back(makeError(ErrorCode::Internal, "not compiled"));
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const std::string symbol = "svm_test_parallel_" + std::to_string(t);
      handles[static_cast<std::size_t>(t)] = (*engine)->compile(symbol, [&](llvm::Module& m) {
        if (t % 2 == 1) markHandVectorized(m);
        return emitAxpy(m, symbol);
      });
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ((*engine)->codegens(), before + kThreads);
  for (int t = 0; t < kThreads; ++t) {
    auto& handle = handles[static_cast<std::size_t>(t)];
    ASSERT_TRUE(handle.hasValue()) << "thread " << t << ": " << handle.status().toString();
    expectAxpy(*handle, 41, "thread " + std::to_string(t));
    ASSERT_TRUE((*engine)->remove(*handle).isOk());
  }
}

}  // namespace
}  // namespace shapevm::jit
