// SPDX-License-Identifier: Apache-2.0
// The compiled-kernel cache: hits and misses through compileKernel, in-process dedupe, damaged
// entries (flipped byte, truncated mid-write, another CPU's or LLVM's key, another symbol),
// eviction under cache_max_mb, four concurrent writer processes, a second process installing
// from the cache with zero LLVM codegen (JIT stats), a miss served by the narrowest kept kernel
// whose ranges cover it (so a process meeting the shapes in another order compiles nothing),
// export/import, an unwritable or full cache
// directory, garbage cache_max_mb, and a cached object that computes the wrong op being rejected
// by validation (then compiled afresh).
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "bytecode/text_format.h"
#include "bytecode/verifier.h"
#include "jit/bf16_variant.h"
#include "jit/jit.h"
#include "jit/kernel_cache.h"
#include "jit/llvm_cpu/llvm_cpu_backend.h"
#include "jit/validate.h"
#include "jit_test_util.h"
#include "support/tunables.h"
#include "vm/vm.h"

namespace shapevm::jit {
namespace {

namespace fs = std::filesystem;
using testing::kAddTanhProgram;
using testing::kDenseTanhProgram;
using testing::operand;
using testing::pointersTo;
using testing::sharedBackend;
using testing::specFor;

// A fresh directory per test, removed afterwards.
class KernelCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Tunables::resetToDefaults();
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = (fs::temp_directory_path() / fmt::format("svm-kcache-{}-{}", ::getpid(), info->name())).string();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    Tunables::resetToDefaults();
    std::error_code ignored;
    fs::permissions(dir_, fs::perms::owner_all, ignored);
    fs::remove_all(dir_, ignored);
  }

  // A backend of its own (a fresh LLJIT and codegen counter) with a fresh cache object on `dir`
  // (nothing in memory: every hit comes from disk).
  static std::unique_ptr<LlvmCpuBackend> backendWithCache(const std::string& dir) {
    auto backend = LlvmCpuBackend::create();
    EXPECT_TRUE(backend.hasValue()) << backend.status().toString();
    (*backend)->setKernelCache(std::make_shared<KernelCache>(dir));
    return std::move(*backend);
  }

  std::vector<Value> addInputs(std::int64_t rows = 5, std::int64_t cols = 13) {
    std::mt19937 rng(7);
    return {operand(DType::Float32, Shape{rows, cols}, rng), operand(DType::Float32, Shape{rows, cols}, rng)};
  }

  std::vector<std::string> entryFiles() const {
    std::vector<std::string> files;
    if (!fs::exists(dir_ + "/kernels")) return files;
    for (const auto& entry : fs::directory_iterator(dir_ + "/kernels")) files.push_back(entry.path().string());
    return files;
  }

  // Compiles `spec` on `backend` and checks the kernel against the reference on `inputs`.
  static std::unique_ptr<CompiledKernel> compileAndCheck(KernelBackend& backend, const KernelSpec& spec,
                                                         const std::vector<Value>& inputs) {
    auto kernel = compileKernel(backend, *familyFor(spec.op), spec);
    EXPECT_TRUE(kernel.hasValue()) << kernel.status().toString();
    if (!kernel) return nullptr;
    std::vector<Shape> observed;
    for (const Value& v : inputs) observed.push_back(v.tensor().shape());
    const Status valid = validateKernel(**kernel, validationShapes((*kernel)->spec, observed), 3);
    EXPECT_TRUE(valid.isOk()) << valid.toString();
    return std::move(*kernel);
  }

  std::string dir_;
};

TEST_F(KernelCacheTest, MissCompilesAndStoresHitLoadsWithoutCodegen) {
  const std::vector<Value> inputs = addInputs();
  const KernelSpec spec = specFor("add", inputs);
  auto first = backendWithCache(dir_);
  auto k1 = compileAndCheck(*first, spec, inputs);
  ASSERT_NE(k1, nullptr);
  EXPECT_FALSE(k1->from_cache);
  EXPECT_EQ(first->codegens(), 1u);
  EXPECT_EQ(first->kernelsFromCache(), 0u);
  ASSERT_EQ(entryFiles().size(), 1u);
  EXPECT_EQ(first->kernelCache()->stats().stores, 1u);

  auto second = backendWithCache(dir_);
  auto k2 = compileAndCheck(*second, spec, inputs);
  ASSERT_NE(k2, nullptr);
  EXPECT_TRUE(k2->from_cache);
  EXPECT_EQ(k2->cache_key, k1->cache_key);
  EXPECT_EQ(second->codegens(), 0u) << "a hit adds the object file: no IR, no LLVM codegen";
  EXPECT_EQ(second->kernelsFromCache(), 1u);
  EXPECT_EQ(second->kernelCache()->stats().disk_hits, 1u);
  EXPECT_TRUE(first->free(k1->handle).isOk());
  EXPECT_TRUE(second->free(k2->handle).isOk());
}

TEST_F(KernelCacheTest, IdenticalKernelsInOneProcessAreCompiledOnce) {
  const std::vector<Value> inputs = addInputs();
  const KernelSpec spec = specFor("add", inputs);
  auto backend = backendWithCache(dir_);
  auto a = compileAndCheck(*backend, spec, inputs);
  auto b = compileAndCheck(*backend, spec, inputs);  // another site, the same kernel
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(backend->codegens(), 1u);
  EXPECT_TRUE(b->from_cache);
  EXPECT_EQ(backend->kernelCache()->stats().memory_hits, 1u);
  EXPECT_NE(a->handle.address, b->handle.address) << "two live versions, each removable on its own";
  EXPECT_TRUE(backend->free(a->handle).isOk());
  // The other version still runs after the first is freed.
  std::vector<Value> out(1);
  ASSERT_TRUE(invokeCompiled(*b, pointersTo(inputs), out).isOk());
  EXPECT_TRUE(backend->free(b->handle).isOk());
  // Without a disk cache (cache_max_mb 0) the dedupe still holds.
  ASSERT_TRUE(Tunables::set(Tunable::CacheMaxMb, 0).isOk());
  auto memory_only = backendWithCache(dir_ + "/other");
  auto c = compileAndCheck(*memory_only, spec, inputs);
  auto d = compileAndCheck(*memory_only, spec, inputs);
  EXPECT_EQ(memory_only->codegens(), 1u);
  EXPECT_FALSE(fs::exists(dir_ + "/other/kernels"));
}

TEST_F(KernelCacheTest, KeyCoversSpecParamsTargetAndCompiler) {
  const std::vector<Value> inputs = addInputs();
  const KernelFamily& family = *familyFor(OpId::Add);
  const KernelSpec spec = sharedBackend().targetSpec(specFor("add", inputs, {}, testing::Dims::Symbolic));
  const std::string identity = sharedBackend().codeIdentity();
  const std::string& host = sharedBackend().capabilities().target;
  const std::string key = kernelCacheKey(family, spec, identity, host);
  EXPECT_EQ(key, kernelCacheKey(family, spec, identity, host)) << "stable";
  EXPECT_NE(key.find(identity), std::string::npos);
  EXPECT_NE(key.find(shapevmBuildIdentity()), std::string::npos);
  KernelSpec ranged = spec;
  ranged.inputs[0].dims[0].hi = 64;
  KernelSpec divided = spec;
  divided.inputs[1].dims[1].divisor = 8;
  KernelSpec tuned = spec;
  tuned.params.unroll = 4;
  // Another vector width than this host's (an AVX-512 host gets 256, any other 512).
  KernelSpec other_width = spec;
  other_width.target.vector_bits = spec.target.vector_bits == 512 ? 256 : 512;
  for (const KernelSpec* other : {&ranged, &divided, &tuned, &other_width}) {
    EXPECT_NE(kernelCacheKey(family, *other, identity, host), key);
  }
  EXPECT_NE(kernelCacheKey(family, spec, identity + " +avx512f", host), key) << "another CPU's features";
  EXPECT_NE(KernelCache::fileName(kernelCacheKey(family, spec, "llvm 18.1.0; x86_64", host)),
            KernelCache::fileName(key));
  EXPECT_NE(identity.find("llvm 19"), std::string::npos) << identity;
}

// A default bfloat16 matmul resolves its variant (pair dot products or widening) from the host's
// measured verdict (jit/bf16_variant.h): the key names the resolved variant, so after the verdict
// changes the kept kernel of the old one is not served (from memory, disk or a wider kept kernel).
TEST_F(KernelCacheTest, ABf16DefaultKeptUnderTheOtherVerdictIsNotServed) {
  if (!sharedBackend().capabilities().isa.bf16_dot) GTEST_SKIP() << "no bf16 pair dot products on this CPU";
  const std::string& host = sharedBackend().capabilities().target;
  struct RestoreVerdict {
    std::string cpu;
    Bf16Variant saved = bf16Default(cpu);
    ~RestoreVerdict() { setBf16Default(cpu, saved); }
  } restore{host};
  setBf16Default(host, Bf16Variant::Unmeasured);
  std::mt19937 rng(11);
  const std::vector<Value> inputs = {operand(DType::BFloat16, Shape{9, 40}, rng),
                                     operand(DType::BFloat16, Shape{40, 70}, rng)};
  const KernelSpec spec = specFor("matmul", inputs);
  const KernelFamily& family = *familyFor(OpId::MatMul);
  const KernelSpec stamped = sharedBackend().targetSpec(spec);
  const std::string identity = sharedBackend().codeIdentity();
  const std::string prior = kernelCacheKey(family, stamped, identity, host);
  EXPECT_NE(prior.find("bf16 default pairs"), std::string::npos) << prior;

  auto backend = backendWithCache(dir_);
  auto pairs = compileAndCheck(*backend, spec, inputs);
  ASSERT_NE(pairs, nullptr);
  EXPECT_NE(pairs->handle.symbol.find("_bf16pairs"), std::string::npos) << pairs->handle.symbol;
  EXPECT_EQ(pairs->cache_key, prior);

  setBf16Default(host, Bf16Variant::Widening);
  const std::string measured = kernelCacheKey(family, stamped, identity, host);
  EXPECT_NE(measured, prior);
  EXPECT_NE(kernelShapeClass(measured), kernelShapeClass(prior)) << "a wider kept kernel must not serve it either";
  EXPECT_NE(measured.find("bf16 default widening"), std::string::npos) << measured;
  auto widening = compileAndCheck(*backend, spec, inputs);  // the same process: a memory miss
  ASSERT_NE(widening, nullptr);
  EXPECT_FALSE(widening->from_cache);
  EXPECT_EQ(widening->handle.symbol.find("_bf16pairs"), std::string::npos) << widening->handle.symbol;
  EXPECT_EQ(backend->codegens(), 2u);
  auto fresh = backendWithCache(dir_);  // another process: the disk holds both, each under its own key
  auto again = compileAndCheck(*fresh, spec, inputs);
  ASSERT_NE(again, nullptr);
  EXPECT_TRUE(again->from_cache);
  EXPECT_EQ(again->cache_key, measured);
  EXPECT_EQ(again->handle.symbol.find("_bf16pairs"), std::string::npos) << again->handle.symbol;
  // Explicit variants name themselves in their params: no verdict in their keys.
  KernelSpec explicit_pairs = stamped;
  explicit_pairs.params.bf16_dot = 1;
  EXPECT_EQ(kernelCacheKey(family, explicit_pairs, identity, host).find("bf16 default"), std::string::npos);
  for (auto* kernel : {pairs.get(), widening.get()}) EXPECT_TRUE(backend->free(kernel->handle).isOk());
  EXPECT_TRUE(fresh->free(again->handle).isOk());
}

// `spec` with dim 0 of every input ranged lo..hi (the rest as they are).
KernelSpec withRows(KernelSpec spec, std::int64_t lo, std::int64_t hi) {
  for (OperandSpec& operand : spec.inputs) {
    operand.dims[0] = DimSpec{};
    operand.dims[0].lo = lo;
    operand.dims[0].hi = hi;
  }
  return spec;
}

TEST_F(KernelCacheTest, TheKeysDimsAreALineOfTheirOwnAndTheRestIsTheShapeClass) {
  const std::vector<Value> inputs = addInputs();
  const KernelFamily& family = *familyFor(OpId::Add);
  const KernelSpec exact = sharedBackend().targetSpec(specFor("add", inputs));
  const KernelSpec ranged = withRows(exact, 2, 64);
  const std::string identity = sharedBackend().codeIdentity();
  const std::string& host = sharedBackend().capabilities().target;
  const std::string a = kernelCacheKey(family, exact, identity, host),
                    b = kernelCacheKey(family, ranged, identity, host);
  EXPECT_NE(a, b);
  EXPECT_EQ(kernelShapeClass(a), kernelShapeClass(b));
  EXPECT_EQ(KernelCache::fileName(a).substr(0, 17), KernelCache::fileName(b).substr(0, 17)) << "one prefix per class";
  EXPECT_NE(KernelCache::fileName(a), KernelCache::fileName(b));
  KernelSpec tuned = ranged;
  tuned.params.unroll = 4;
  EXPECT_NE(kernelShapeClass(kernelCacheKey(family, tuned, identity, host)), kernelShapeClass(b))
      << "params are no dims";
  const std::optional<KeyDims> exact_dims = kernelKeyDims(a), ranged_dims = kernelKeyDims(b);
  ASSERT_TRUE(exact_dims && ranged_dims);
  ASSERT_EQ(ranged_dims->size(), 2u);
  ASSERT_EQ((*ranged_dims)[0].size(), 2u);
  EXPECT_EQ((*ranged_dims)[0][0].lo, 2);
  EXPECT_EQ((*ranged_dims)[0][0].hi, 64);
  EXPECT_EQ((*ranged_dims)[0][1].size, 13);
  EXPECT_EQ((*exact_dims)[1][0].size, 5);
  EXPECT_TRUE(keyDimsCover(*ranged_dims, *exact_dims));
  EXPECT_FALSE(keyDimsCover(*exact_dims, *ranged_dims));
  EXPECT_FALSE(
      keyDimsCover(*kernelKeyDims(kernelCacheKey(family, withRows(exact, 8, 64), identity, host)), *exact_dims));
  // A garbled dims line is no dims at all (and so covers nothing).
  std::string garbled = b;
  garbled.replace(garbled.find("\ndims ") + 6, 1, "x");
  EXPECT_FALSE(kernelKeyDims(garbled).has_value());
  EXPECT_FALSE(kernelKeyDims("kernel add\ninputs f32r2;").has_value());
}

TEST_F(KernelCacheTest, AMissIsServedByTheNarrowestKeptKernelWhoseRangesCoverIt) {
  const std::vector<Value> inputs = addInputs(5, 13);
  const KernelSpec exact = specFor("add", inputs);
  {
    // Exact keys only while warming: else 2..128 (kept first) would serve the two others.
    ASSERT_TRUE(Tunables::set(Tunable::CacheCovering, 0).isOk());
    auto warm = backendWithCache(dir_);
    for (const auto& [lo, hi] : {std::pair{2, 128}, std::pair{2, 64}, std::pair{64, 128}}) {
      ASSERT_NE(compileAndCheck(*warm, withRows(exact, lo, hi), addInputs(lo + 1, 13)), nullptr);
    }
    EXPECT_EQ(warm->codegens(), 3u);
    ASSERT_TRUE(Tunables::set(Tunable::CacheCovering, 1).isOk());
  }
  auto replica = backendWithCache(dir_);
  auto kernel = compileAndCheck(*replica, exact, inputs);
  ASSERT_NE(kernel, nullptr);
  EXPECT_TRUE(kernel->from_cache);
  EXPECT_EQ(replica->codegens(), 0u);
  EXPECT_EQ(replica->kernelCache()->stats().covering_hits, 1u);
  const DimSpec& rows = kernel->spec.inputs[0].dims[0];
  EXPECT_FALSE(rows.isStatic());
  EXPECT_EQ(rows.lo, 2) << "the narrowest covering entry: 2..64, not 2..128 (64..128 does not cover 5)";
  EXPECT_EQ(rows.hi, 64);
  EXPECT_EQ(kernel->spec.inputs[0].dims[1].size, 13);
  // Its code serves every extent of its own range.
  const std::vector<Value> forty = addInputs(40, 13);
  std::vector<Value> out(1);
  ASSERT_TRUE(invokeCompiled(*kernel, pointersTo(forty), out).isOk());
  const Tensor want = callOp("add", {forty[0], forty[1]}).value()[0].tensor();
  for (std::int64_t i = 0; i < want.numel(); ++i) {
    ASSERT_EQ(want.elementAsDouble(i), out[0].tensor().elementAsDouble(i));
  }
  // Nothing covers 200 rows: compiled. And cache_covering=0 asks for exact keys only.
  ASSERT_NE(compileAndCheck(*replica, specFor("add", addInputs(200, 13)), addInputs(200, 13)), nullptr);
  EXPECT_EQ(replica->codegens(), 1u);
  ASSERT_TRUE(Tunables::set(Tunable::CacheCovering, 0).isOk());
  auto exact_only = backendWithCache(dir_);
  auto compiled = compileAndCheck(*exact_only, exact, inputs);
  ASSERT_NE(compiled, nullptr);
  EXPECT_FALSE(compiled->from_cache);
  EXPECT_EQ(exact_only->codegens(), 1u);
  EXPECT_TRUE(replica->free(kernel->handle).isOk());
}

TEST_F(KernelCacheTest, CorruptTruncatedAndForeignEntriesAreIgnoredAndRecompiled) {
  const std::vector<Value> inputs = addInputs();
  const KernelSpec spec = specFor("add", inputs);
  {
    auto backend = backendWithCache(dir_);
    ASSERT_NE(compileAndCheck(*backend, spec, inputs), nullptr);
  }
  ASSERT_EQ(entryFiles().size(), 1u);
  const std::string path = entryFiles()[0];
  std::string good;
  {
    std::ifstream in(path, std::ios::binary);
    good.assign(std::istreambuf_iterator<char>(in), {});
  }
  Expected<CachedCode> decoded = KernelCache::decode(good);
  ASSERT_TRUE(decoded.hasValue()) << decoded.status().toString();
  // Another CPU / another LLVM under this key's file name (a copied or renamed file).
  CachedCode foreign = *decoded;
  const std::size_t llvm_at = foreign.key.find("llvm 19");
  ASSERT_NE(llvm_at, std::string::npos);
  foreign.key.replace(llvm_at, 7, "llvm 18");
  CachedCode other_cpu = *decoded;
  other_cpu.key += " +avx512f";
  std::string flipped = good;
  flipped[flipped.size() / 2] ^= 0x40;
  const std::vector<std::pair<std::string, std::string>> damaged = {
      {"flipped byte", flipped},
      {"truncated mid-write", good.substr(0, good.size() / 2)},
      {"header only", good.substr(0, 20)},
      {"empty", ""},
      {"another LLVM", KernelCache::encode(foreign)},
      {"another CPU", KernelCache::encode(other_cpu)},
  };
  for (const auto& [what, bytes] : damaged) {
    {
      std::ofstream out(path, std::ios::binary | std::ios::trunc);
      out << bytes;
    }
    auto backend = backendWithCache(dir_);
    auto kernel = compileAndCheck(*backend, spec, inputs);
    ASSERT_NE(kernel, nullptr) << what;
    EXPECT_FALSE(kernel->from_cache) << what;
    EXPECT_EQ(backend->codegens(), 1u) << what << ": recompiled";
    EXPECT_EQ(backend->kernelCache()->stats().rejected, 1u) << what;
    // The fresh compile replaced the damaged file with a good entry.
    std::ifstream in(path, std::ios::binary);
    const std::string now(std::istreambuf_iterator<char>(in), {});
    EXPECT_TRUE(KernelCache::decode(now).hasValue()) << what;
    EXPECT_TRUE(backend->free(kernel->handle).isOk());
  }
  // An intact entry whose bytes are no object file: loading fails, it is dropped, recompiled.
  CachedCode garbage = *decoded;
  garbage.bytes = "not an ELF object";
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << KernelCache::encode(garbage);
  }
  auto backend = backendWithCache(dir_);
  auto kernel = compileAndCheck(*backend, spec, inputs);
  ASSERT_NE(kernel, nullptr);
  EXPECT_FALSE(kernel->from_cache);
  EXPECT_EQ(backend->codegens(), 1u);
}

TEST_F(KernelCacheTest, CachedObjectComputingTheWrongOpIsRejectedByValidation) {
  // The cache entry for `sub` holds a well-formed object (valid checksum, right symbol) whose
  // code computes `add`: only validation can tell.
  const std::vector<Value> inputs = addInputs(40, 24);
  const KernelSpec sub = sharedBackend().targetSpec(specFor("sub", inputs));
  const KernelSpec add = sharedBackend().targetSpec(specFor("add", inputs));
  auto backend = backendWithCache(dir_);
  const std::string symbol = "svm_" + familyFor(OpId::Sub)->symbolStem(sub);
  const auto* emitter = dynamic_cast<const LlvmKernelEmitter*>(familyFor(OpId::Add));
  ASSERT_NE(emitter, nullptr);
  auto built =
      backend->engine().build(symbol, [&](llvm::Module& module) { return emitter->emit(add, module, symbol); });
  ASSERT_TRUE(built.hasValue()) << built.status().toString();
  auto object = backend->engine().emitObject(std::move(*built));
  ASSERT_TRUE(object.hasValue()) << object.status().toString();
  const std::string key =
      kernelCacheKey(*familyFor(OpId::Sub), sub, backend->codeIdentity(), backend->capabilities().target);
  backend->kernelCache()->store(CachedCode{key, symbol, std::string(backend->codeBytes(**object))});
  const std::uint64_t codegens = backend->codegens();

  auto wrong = compileKernel(*backend, *familyFor(OpId::Sub), sub);
  ASSERT_TRUE(wrong.hasValue()) << wrong.status().toString();
  EXPECT_TRUE((*wrong)->from_cache);
  std::vector<Shape> observed = {Shape{40, 24}, Shape{40, 24}};
  const Status verdict = validateKernel(**wrong, validationShapes(sub, observed), 11);
  ASSERT_FALSE(verdict.isOk()) << "a wrong cached object must never be installed";
  EXPECT_NE(verdict.message().find("disagrees"), std::string::npos) << verdict.toString();
  EXPECT_FALSE(fs::exists(dir_ + "/kernels/" + KernelCache::fileName(key))) << "the bad entry is dropped";
  EXPECT_TRUE(backend->free((*wrong)->handle).isOk());
  // The next compile is a fresh codegen, and it validates.
  auto fresh = compileAndCheck(*backend, sub, inputs);
  ASSERT_NE(fresh, nullptr);
  EXPECT_FALSE(fresh->from_cache);
  EXPECT_EQ(backend->codegens(), codegens + 1);
}

TEST_F(KernelCacheTest, FaultInjectedKernelsAreCaughtWithSampledValidation) {
  // Many rows: validation samples rows, and the corrupted first element is always among them.
  for (const char* op : {"add", "mul", "tanh"}) {
    std::mt19937 rng(5);
    std::vector<Value> inputs = {operand(DType::Float32, Shape{300, 64}, rng)};
    if (std::string_view(op) != "tanh") inputs.push_back(operand(DType::Float32, Shape{64}, rng));
    KernelSpec spec = specFor(op, inputs, {}, testing::Dims::Symbolic);
    spec.inputs[0].dims[0].lo = 16;
    spec.inputs[0].dims[0].hi = 512;
    auto kernel = compileKernel(sharedBackend(), *familyFor(spec.op), spec);
    ASSERT_TRUE(kernel.hasValue());
    std::vector<Shape> observed;
    for (const Value& v : inputs) observed.push_back(v.tensor().shape());
    EXPECT_TRUE(validateKernel(**kernel, validationShapes(spec, observed), 1).isOk()) << op;
    (*kernel)->corrupt_outputs = true;
    for (std::uint64_t seed = 0; seed < 10; ++seed) {
      EXPECT_FALSE(validateKernel(**kernel, validationShapes(spec, observed), seed).isOk()) << op << " seed " << seed;
    }
    EXPECT_TRUE(sharedBackend().free((*kernel)->handle).isOk());
  }
  // A matmul too (sampled rows of A against the whole of B).
  std::mt19937 rng(9);
  std::vector<Value> mm = {operand(DType::Float32, Shape{200, 96}, rng), operand(DType::Float32, Shape{96, 80}, rng)};
  KernelSpec spec = specFor("matmul", mm);
  auto kernel = compileKernel(sharedBackend(), *familyFor(spec.op), spec);
  ASSERT_TRUE(kernel.hasValue());
  const std::vector<Shape> observed = {Shape{200, 96}, Shape{96, 80}};
  EXPECT_TRUE(validateKernel(**kernel, validationShapes(spec, observed), 2).isOk());
  (*kernel)->corrupt_outputs = true;
  EXPECT_FALSE(validateKernel(**kernel, validationShapes(spec, observed), 2).isOk());
  EXPECT_TRUE(sharedBackend().free((*kernel)->handle).isOk());
}

TEST_F(KernelCacheTest, EvictsLeastRecentlyUsedBeyondTheCap) {
  ASSERT_TRUE(Tunables::set(Tunable::CacheMaxMb, 1).isOk());
  KernelCache cache(dir_);
  const std::string payload(100 * 1024, 'x');
  // The first entry is used again after every store: it must survive.
  for (int i = 0; i < 30; ++i) {
    cache.store(CachedCode{fmt::format("key {}", i), "svm_k", payload});
    if (i > 0) {
      KernelCache reader(dir_);  // a disk read (touches the file), not the in-process map
      EXPECT_TRUE(reader.find("key 0").has_value()) << i;
    }
    // Distinct modification times, so LRU order is well defined on coarse clocks.
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  const KernelCacheStats stats = cache.stats();
  EXPECT_LE(stats.bytes, std::uint64_t{1} << 20);
  EXPECT_GT(stats.evictions, 0u);
  KernelCache reader(dir_);
  EXPECT_TRUE(reader.find("key 0").has_value()) << "recently used";
  EXPECT_TRUE(reader.find("key 29").has_value()) << "newest";
  EXPECT_FALSE(reader.find("key 1").has_value()) << "least recently used";
}

// A kept planning run is mapped, not read (install_record.h): the mapping shows the file's bytes,
// a write to it changes this process's copy only, and it outlives a replacement of the file.
TEST_F(KernelCacheTest, MappedInstallRecordsShowTheFileAndAreCopyOnWrite) {
  KernelCache cache(dir_);
  EXPECT_EQ(cache.mapInstallRecord("absent.svmv"), nullptr);
  std::mt19937_64 rng(11);
  std::string bytes(70000, '\0');
  for (char& c : bytes) c = static_cast<char>(rng());
  ASSERT_TRUE(cache.writeInstallRecord("run.svmv", bytes));
  ASSERT_TRUE(cache.writeInstallRecord("empty.svmv", ""));
  EXPECT_EQ(cache.mapInstallRecord("empty.svmv"), nullptr);
  const std::shared_ptr<const MappedFile> mapped = cache.mapInstallRecord("run.svmv");
  ASSERT_NE(mapped, nullptr);
  ASSERT_EQ(mapped->bytes(), bytes);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(mapped->data()) % 64, 0u) << "contents at aligned offsets stay aligned";
  mapped->data()[123] = static_cast<char>(~bytes[123]);
  EXPECT_EQ(cache.readInstallRecord("run.svmv"), bytes) << "a write to the mapping never reaches the file";
  std::string replaced = bytes;
  replaced[5] = static_cast<char>(~replaced[5]);
  ASSERT_TRUE(cache.writeInstallRecord("run.svmv", replaced));  // temporary file + rename
  EXPECT_EQ(mapped->data()[5], bytes[5]) << "the mapping keeps the file it mapped";
  EXPECT_EQ(cache.readInstallRecord("run.svmv"), replaced);
}

TEST_F(KernelCacheTest, FourConcurrentWriterProcesses) {
  const std::string payload(20000, 'p');
  std::vector<pid_t> children;
  for (int p = 0; p < 4; ++p) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      KernelCache cache(dir_);
      for (int i = 0; i < 40; ++i) {
        // Shared keys (every process writes them) and own keys.
        cache.store(CachedCode{fmt::format("shared {}", i % 10), "svm_shared", payload + std::to_string(i % 10)});
        cache.store(CachedCode{fmt::format("own {} {}", p, i), "svm_own", payload});
        KernelCache reader(dir_);
        if (auto got = reader.find(fmt::format("shared {}", (i + 3) % 10)); got && got->symbol != "svm_shared")
          _exit(3);
      }
      _exit(0);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  }
  int entries = 0;
  for (const std::string& file : entryFiles()) {
    EXPECT_EQ(file.find(".tmp."), std::string::npos) << "no temporary file left: " << file;
    std::ifstream in(file, std::ios::binary);
    const std::string bytes(std::istreambuf_iterator<char>(in), {});
    Expected<CachedCode> code = KernelCache::decode(bytes);
    ASSERT_TRUE(code.hasValue()) << file << ": " << code.status().toString();
    EXPECT_EQ(fs::path(file).filename().string(), KernelCache::fileName(code->key));
    ++entries;
  }
  EXPECT_EQ(entries, 10 + 4 * 40);
}

// Runs DISABLED_KernelCacheChild.<test> in a fresh process of this test binary (runTestInChild)
// with SVM_KCACHE_DIR set to `dir`; its exit code, or -1.
int runChild(const std::string& test, const std::string& dir, const std::vector<std::string>& more_env = {}) {
  std::vector<std::string> env{"SVM_KCACHE_DIR=" + dir};
  env.insert(env.end(), more_env.begin(), more_env.end());
  return testing::runTestInChild("DISABLED_KernelCacheChild." + test, env);
}

// Runs kAddTanhProgram under an O1 JIT on $SVM_KCACHE_DIR (in a fresh process: runChild); exits with
// 10 + kernels from the cache + 20 * LLVM codegens when the results match the reference, else 1.
TEST(DISABLED_KernelCacheChild, RunProgram) {
  const char* dir = std::getenv("SVM_KCACHE_DIR");
  if (dir == nullptr) GTEST_SKIP();
  Tunables::resetToDefaults();
  (void)Tunables::set(Tunable::HotMs, 0);
  (void)Tunables::set(Tunable::JitLevel, 1);
  (void)Tunables::set(Tunable::WarmupRuns, 0);
  (void)Tunables::set(Tunable::HotCount, 1);
  auto module = assemble(kAddTanhProgram, "cache.svasm");
  if (!module) _exit(1);
  VirtualMachine vm(std::make_shared<Module>(std::move(*module)));
  JitOptions options;
  options.wait_for_compiles = true;
  options.kernel_cache_dir = dir;
  auto jit = Jit::attach(vm, options);
  if (!jit) _exit(1);
  std::mt19937 rng(3);
  for (int run = 0; run < 3; ++run) {
    std::vector<Value> in = {operand(DType::Float32, Shape{6, 33}, rng), operand(DType::Float32, Shape{6, 33}, rng)};
    auto out = vm.run(0, in);
    if (!out) _exit(1);
    Value sum = callOp("add", {in[0], in[1]}).value()[0];
    Value want = callOp("tanh", {sum}).value()[0];
    for (std::int64_t i = 0; i < want.tensor().numel(); ++i) {
      if (std::abs(want.tensor().elementAsDouble(i) - (*out)[0].tensor().elementAsDouble(i)) > 1e-6) _exit(1);
    }
  }
  const JitStats stats = (*jit)->stats();
  if (stats.compiles != 2) _exit(1);
  _exit(static_cast<int>(10 + stats.kernels_from_cache + 20 * stats.codegen_count));
}

// Runs kDenseTanhProgram under an O2 JIT (no tuner) on $SVM_KCACHE_DIR, three times per row count of
// $SVM_KCACHE_ROWS ("3,64,17") in that order, with cache_covering = $SVM_KCACHE_COVERING; exits
// with 10 + LLVM codegens (at most 200) when every result matches the reference, else 1.
TEST(DISABLED_KernelCacheChild, RunRowsInOrder) {
  const char* dir = std::getenv("SVM_KCACHE_DIR");
  const char* rows = std::getenv("SVM_KCACHE_ROWS");
  const char* covering = std::getenv("SVM_KCACHE_COVERING");
  if (dir == nullptr || rows == nullptr) GTEST_SKIP();
  Tunables::resetToDefaults();
  (void)Tunables::set(Tunable::HotMs, 0);
  (void)Tunables::set(Tunable::JitLevel, 2);
  (void)Tunables::set(Tunable::WarmupRuns, 0);
  (void)Tunables::set(Tunable::HotCount, 1);
  (void)Tunables::set(Tunable::GuardMissRecompile, 1);
  (void)Tunables::set(Tunable::CacheCovering, covering != nullptr && std::string(covering) == "0" ? 0 : 1);
  auto module = assemble(kDenseTanhProgram, "dense.svasm");
  if (!module) _exit(1);
  VirtualMachine vm(std::make_shared<Module>(std::move(*module)));
  JitOptions options;
  options.wait_for_compiles = true;
  options.kernel_cache_dir = dir;
  auto jit = Jit::attach(vm, options);
  if (!jit) _exit(1);
  std::mt19937 rng(5);
  const Value w = operand(DType::Float32, Shape{32, 48}, rng), b = operand(DType::Float32, Shape{48}, rng);
  for (std::string_view list = rows; !list.empty();) {
    const std::size_t comma = std::min(list.find(','), list.size());
    const std::int64_t n = std::stoll(std::string(list.substr(0, comma)));
    list.remove_prefix(std::min(comma + 1, list.size()));
    for (int run = 0; run < 3; ++run) {
      const Value x = operand(DType::Float32, Shape{n, 32}, rng);
      const std::vector<Value> args = {x, w, b};
      auto out = vm.run(0, args);
      if (!out) _exit(1);
      const Value product = callOp("matmul", {x, w}).value()[0];
      const Value want = callOp("tanh", {callOp("add", {product, b}).value()[0]}).value()[0];
      for (std::int64_t i = 0; i < want.tensor().numel(); ++i) {
        if (std::abs(want.tensor().elementAsDouble(i) - (*out)[0].tensor().elementAsDouble(i)) > 1e-5) _exit(1);
      }
    }
  }
  const JitStats stats = (*jit)->stats();
  if (stats.compiles == 0) _exit(1);
  _exit(static_cast<int>(10 + std::min<std::uint64_t>(stats.codegen_count, 200)));
}

// A full disk: files may not grow beyond 100 bytes (EFBIG on write). Exits 0 when the kernel
// compiled, ran, and the cache counted one failed write and no store.
TEST(DISABLED_KernelCacheChild, FullDisk) {
  const char* dir = std::getenv("SVM_KCACHE_DIR");
  if (dir == nullptr) GTEST_SKIP();
  ::signal(SIGXFSZ, SIG_IGN);
  rlimit limit{100, 100};
  if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) _exit(2);
  std::mt19937 rng(7);
  const std::vector<Value> inputs = {operand(DType::Float32, Shape{5, 13}, rng),
                                     operand(DType::Float32, Shape{5, 13}, rng)};
  const KernelSpec spec = specFor("add", inputs);
  auto backend = LlvmCpuBackend::create();
  if (!backend) _exit(1);
  (*backend)->setKernelCache(std::make_shared<KernelCache>(dir));
  auto k = compileKernel(**backend, *familyFor(spec.op), spec);
  if (!k) _exit(1);
  std::vector<Value> out(1);
  if (!invokeCompiled(**k, pointersTo(inputs), out).isOk()) _exit(1);
  const KernelCacheStats stats = (*backend)->kernelCache()->stats();
  _exit(stats.write_failures == 1 && stats.stores == 0 ? 0 : 3);
}

TEST_F(KernelCacheTest, SecondProcessInstallsFromTheCacheWithZeroCodegen) {
  EXPECT_EQ(runChild("RunProgram", dir_), 10 + 0 + 20 * 2) << "first process: two codegens";
  EXPECT_EQ(runChild("RunProgram", dir_), 10 + 2 + 20 * 0) << "second process: both kernels from the cache";
}

// Which row ranges a process asks for depends on the order it meets the row counts in; a process
// meeting them in another order than the one that warmed the cache is served by the kept kernels
// whose ranges cover what it asks for, and compiles nothing. Without that (cache_covering=0) it
// compiles what the first process's history did not name exactly.
TEST_F(KernelCacheTest, AProcessMeetingTheShapesInAnotherOrderCompilesNothing) {
  const int first = runChild("RunRowsInOrder", dir_, {"SVM_KCACHE_ROWS=3,5,17,33,64"});
  EXPECT_GT(first, 10) << "the first process compiles (exit 1: a wrong result)";
  EXPECT_EQ(runChild("RunRowsInOrder", dir_, {"SVM_KCACHE_ROWS=64,3,33,5,17"}), 10) << "no LLVM codegen";
  fs::remove_all(dir_ + "/exact");
  ASSERT_GT(runChild("RunRowsInOrder", dir_ + "/exact", {"SVM_KCACHE_ROWS=3,5,17,33,64", "SVM_KCACHE_COVERING=0"}), 10);
  EXPECT_GT(runChild("RunRowsInOrder", dir_ + "/exact", {"SVM_KCACHE_ROWS=64,3,33,5,17", "SVM_KCACHE_COVERING=0"}), 10)
      << "exact keys only: the other order's first kernels are not in the cache";
}

TEST_F(KernelCacheTest, ExportImportShipsAWarmedCache) {
  const std::vector<Value> inputs = addInputs();
  const KernelSpec spec = specFor("add", inputs);
  {
    auto backend = backendWithCache(dir_ + "/build");
    ASSERT_NE(compileAndCheck(*backend, spec, inputs), nullptr);
  }
  KernelCache built(dir_ + "/build");
  Expected<int> exported = built.exportTo(dir_ + "/shipped/kernels");
  ASSERT_TRUE(exported.hasValue()) << exported.status().toString();
  EXPECT_EQ(*exported, 1);
  // A damaged file in the shipment is skipped, not imported.
  { std::ofstream(dir_ + "/shipped/kernels/0123456789abcdef.svmk") << "garbage"; }
  KernelCache replica(dir_ + "/replica");
  Expected<int> imported = replica.importFrom(dir_ + "/shipped/kernels");
  ASSERT_TRUE(imported.hasValue()) << imported.status().toString();
  EXPECT_EQ(*imported, 1);
  auto backend = backendWithCache(dir_ + "/replica");
  auto kernel = compileAndCheck(*backend, spec, inputs);
  ASSERT_NE(kernel, nullptr);
  EXPECT_TRUE(kernel->from_cache);
  EXPECT_EQ(backend->codegens(), 0u);
  EXPECT_FALSE(replica.importFrom(dir_ + "/missing").hasValue());
}

TEST_F(KernelCacheTest, UnwritableOrFullDirectoryWarnsAndStillCompiles) {
  const std::vector<Value> inputs = addInputs();
  const KernelSpec spec = specFor("add", inputs);
  // A regular file where the cache directory should be: nothing can be created under it.
  { std::ofstream(dir_ + "/file") << "x"; }
  auto blocked = backendWithCache(dir_ + "/file");
  auto kernel = compileAndCheck(*blocked, spec, inputs);
  ASSERT_NE(kernel, nullptr);
  EXPECT_EQ(blocked->kernelCache()->stats().write_failures, 1u);
  // In-process dedupe still works.
  ASSERT_NE(compileAndCheck(*blocked, spec, inputs), nullptr);
  EXPECT_EQ(blocked->codegens(), 1u);
  // A full disk (a fresh process whose files may not grow beyond 100 bytes).
  EXPECT_EQ(runChild("FullDisk", dir_ + "/full"), 0);
  for (const auto& entry : fs::directory_iterator(dir_ + "/full/kernels")) {
    ADD_FAILURE() << "nothing may be left of a failed write: " << entry.path();
  }
}

TEST_F(KernelCacheTest, GarbageCacheMaxMbIsRejectedAndTheCacheKeepsWorking) {
  EXPECT_FALSE(Tunables::set("cache_max_mb", "lots").isOk());
  EXPECT_FALSE(Tunables::set("cache_max_mb", "-5").isOk());
  EXPECT_FALSE(Tunables::set("cache_max_mb", "99999999999").isOk());
  EXPECT_EQ(Tunables::get(Tunable::CacheMaxMb), Tunables::info(Tunable::CacheMaxMb).default_value);
  setenv("SHAPEVM_CACHE_MAX_MB", "1e3", 1);
  const Status env = Tunables::loadFromEnvironment();
  unsetenv("SHAPEVM_CACHE_MAX_MB");
  EXPECT_FALSE(env.isOk());
  EXPECT_NE(env.message().find("SHAPEVM_CACHE_MAX_MB"), std::string::npos) << env.toString();
  const std::vector<Value> inputs = addInputs();
  auto backend = backendWithCache(dir_);
  ASSERT_NE(compileAndCheck(*backend, specFor("add", inputs), inputs), nullptr);
  EXPECT_EQ(entryFiles().size(), 1u);
}

}  // namespace
}  // namespace shapevm::jit
