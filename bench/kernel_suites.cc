// SPDX-License-Identifier: Apache-2.0
// Kernel-level suites: JIT matmul vs the reference kernel, oneDNN and the measured FMA peak (plus
// the AutoTuner's choice and bfloat16), elementwise chains and fused normalizations vs a one-pass
// roofline and memcpy, and the interpreter's per-op overhead. Outputs are checked before timing.
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <functional>
#include <limits>
#include <memory>
#include <span>
#include <utility>

#include <fmt/format.h>

#include "bench/bench_common.h"
#include "bytecode/text_format.h"
#include "jit/bf16_variant.h"
#include "jit/compiled_kernel.h"
#include "jit/jit.h"
#include "jit/validate.h"
#include "support/tunables.h"
#include "tune/auto_tuner.h"

namespace shapevm::bench {
namespace {

// The one-thread matmul rows time in the calling thread's CPU time, not on the steady clock: on
// a shared, loaded host (load 10-25 on 2 vCPUs) a kernel's wall time includes whatever time other
// processes held the core, its CPU time does not. Every one-thread row runs on the calling thread
// (KernelThreads=1, OpenMP held to one thread), so its thread's clock is the whole cost; the
// process's clock also counted this process's other threads (OpenMP threads spinning after the
// two-thread rows, the thread pool's workers, the JIT's compile threads), whichever row they
// overlapped (issue 25: the bf16 "pick vs oneDNN" row swung 0.64-1.00x while the same primitive's
// library row read 0.94x). Both sides of every ratio use this clock; the two-thread rows stay on
// the steady clock (their workers' CPU time would add up).
double threadCpuMs() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}
template <typename F>
double medianCpuMs(int repeats, F&& f) {
  std::vector<double> ms;
  for (int r = 0; r < repeats; ++r) {
    const double start = threadCpuMs();
    f();
    ms.push_back(threadCpuMs() - start);
  }
  return summarizeLatency(ms).median;
}

// The fastest and the median of `repeats` calls, thread CPU ms: the fastest call is the one a
// time slice of another process did not evict the kernel's blocks from the caches in.
template <class F>
std::pair<double, double> minMedianCpuMs(int repeats, F&& f) {
  std::vector<double> ms;
  for (int r = 0; r < repeats; ++r) {
    const double start = threadCpuMs();
    f();
    ms.push_back(threadCpuMs() - start);
  }
  return {*std::min_element(ms.begin(), ms.end()), summarizeLatency(ms).median};
}

// oneDNN's matmul primitive (C API) for a row-major C[m, n] = A[m, k] @ B[k, n] on given buffers.
// Created for the thread count OpenMP has when it is built.
class OnednnMatmul {
 public:
  static Expected<std::unique_ptr<OnednnMatmul>> create(std::int64_t m, std::int64_t k, std::int64_t n, void* a,
                                                        void* b, void* c, dnnl_data_type_t dtype = dnnl_f32) {
    auto mm = std::unique_ptr<OnednnMatmul>(new OnednnMatmul());
    auto check = [](dnnl_status_t status, const char* what) -> Status {
      if (status == dnnl_success) return Status::ok();
      return makeError(ErrorCode::Internal, "oneDNN {} failed (status {})", what, static_cast<int>(status));
    };
    SVM_RETURN_IF_ERROR(check(dnnl_engine_create(&mm->engine_, dnnl_cpu, 0), "engine_create"));
    SVM_RETURN_IF_ERROR(
        check(dnnl_stream_create(&mm->stream_, mm->engine_, dnnl_stream_default_flags), "stream_create"));
    dnnl_memory_desc_t a_md, b_md, c_md;
    const dnnl_dims_t a_dims = {m, k}, b_dims = {k, n}, c_dims = {m, n};
    SVM_RETURN_IF_ERROR(check(dnnl_memory_desc_init_by_tag(&a_md, 2, a_dims, dtype, dnnl_ab), "memory_desc"));
    SVM_RETURN_IF_ERROR(check(dnnl_memory_desc_init_by_tag(&b_md, 2, b_dims, dtype, dnnl_ab), "memory_desc"));
    SVM_RETURN_IF_ERROR(check(dnnl_memory_desc_init_by_tag(&c_md, 2, c_dims, dtype, dnnl_ab), "memory_desc"));
    dnnl_matmul_desc_t desc;
    SVM_RETURN_IF_ERROR(check(dnnl_matmul_desc_init(&desc, &a_md, &b_md, nullptr, &c_md), "matmul_desc_init"));
    SVM_RETURN_IF_ERROR(
        check(dnnl_primitive_desc_create(&mm->pd_, &desc, nullptr, mm->engine_, nullptr), "primitive_desc"));
    SVM_RETURN_IF_ERROR(check(dnnl_primitive_create(&mm->primitive_, mm->pd_), "primitive_create"));
    SVM_RETURN_IF_ERROR(check(dnnl_memory_create(&mm->a_, &a_md, mm->engine_, a), "memory_create"));
    SVM_RETURN_IF_ERROR(check(dnnl_memory_create(&mm->b_, &b_md, mm->engine_, b), "memory_create"));
    SVM_RETURN_IF_ERROR(check(dnnl_memory_create(&mm->c_, &c_md, mm->engine_, c), "memory_create"));
    return mm;
  }
  ~OnednnMatmul() {
    for (dnnl_memory_t mem : {a_, b_, c_}) {
      if (mem != nullptr) dnnl_memory_destroy(mem);
    }
    if (primitive_ != nullptr) dnnl_primitive_destroy(primitive_);
    if (pd_ != nullptr) dnnl_primitive_desc_destroy(pd_);
    if (stream_ != nullptr) dnnl_stream_destroy(stream_);
    if (engine_ != nullptr) dnnl_engine_destroy(engine_);
  }
  void run() {
    const dnnl_exec_arg_t args[] = {{DNNL_ARG_SRC, a_}, {DNNL_ARG_WEIGHTS, b_}, {DNNL_ARG_DST, c_}};
    dnnl_primitive_execute(primitive_, stream_, 3, args);
    dnnl_stream_wait(stream_);
  }

 private:
  OnednnMatmul() = default;
  dnnl_engine_t engine_ = nullptr;
  dnnl_stream_t stream_ = nullptr;
  dnnl_primitive_desc_t pd_ = nullptr;
  dnnl_primitive_t primitive_ = nullptr;
  dnnl_memory_t a_ = nullptr, b_ = nullptr, c_ = nullptr;
};

// The matmul family's generated candidates for one shape (library ones left out: "JIT only"),
// timed here: every candidate is compiled, checked against the reference and timed (median); the
// fastest one is kept compiled.
struct TunedMatmul {
  std::unique_ptr<jit::CompiledKernel> kernel;
  double ms = 0;
  int candidates = 0;
  double tune_s = 0;
};

Expected<TunedMatmul> tuneMatmul(jit::LlvmCpuBackend& engine, const jit::KernelFamily& family,
                                 const jit::KernelSpec& base, std::span<const Value* const> inputs, const Tensor& want,
                                 int repeats) {
  TunedMatmul best;
  const Clock::time_point start = Clock::now();
  for (const jit::KernelParams& params : family.searchSpace(base)) {
    if (params.library != 0) continue;
    jit::KernelSpec spec = base;
    spec.params = params;
    auto kernel = jit::compileKernel(engine, family, spec);
    if (!kernel) continue;  // a failed candidate counts as infinitely slow
    ++best.candidates;
    std::vector<Value> out(1);
    auto run = [&] { (void)jit::invokeCompiled(**kernel, inputs, out); };
    run();
    if (!(out[0].isTensor() && relL2(out[0].tensor(), want) <= 1e-5)) {
      (void)engine.free((*kernel)->handle);
      return makeError(ErrorCode::Internal, "matmul candidate {} gives wrong results", params.toString());
    }
    const double ms = medianCpuMs(repeats, run);
    if (std::getenv("SHAPEVM_BENCH_TUNE_LOG") != nullptr)
      fmt::print("  candidate {:<56} {:8.3f} ms\n", params.toString(), ms);
    if (best.kernel == nullptr || ms < best.ms) {
      if (best.kernel != nullptr) (void)engine.free(best.kernel->handle);
      best.kernel = std::move(*kernel);
      best.ms = ms;
    } else {
      (void)engine.free((*kernel)->handle);
    }
  }
  best.tune_s = msSince(start) / 1000.0;
  if (best.kernel == nullptr) return makeError(ErrorCode::Internal, "no matmul candidate compiled");
  return best;
}

// SHAPEVM_BENCH_MATMUL_COMPARE="default;mr=4 nr=64 kc=128;onednn": instead of the suite, each
// shape's listed float32 kernels (KernelParams text) against oneDNN, for deciding a default by
// measurement on a loaded host. Interleaved rounds (SHAPEVM_BENCH_ROUNDS, default 11) in an order
// rotated every round, one thread, thread CPU time; per kernel the median of its per-round ratio
// to oneDNN (the faster of sgemm and the matmul primitive in that round) and the range of those
// ratios. "oneDNN again" is a second primitive for the same shape: its ratio is the noise floor.
// SHAPEVM_BENCH_MATMUL_DTYPE=bf16|f16 times bfloat16/float16 operands and output instead; the bar is
// then oneDNN's matmul primitive of that dtype (sgemm has none), and the row fails where oneDNN
// cannot create it.
Status matmulCompare(jit::LlvmCpuBackend& engine, const jit::KernelFamily& family,
                     const std::vector<std::array<std::int64_t, 3>>& shapes, const std::string& list, json& out) {
  DType dtype = DType::Float32;
  dnnl_data_type_t dnnl_dtype = dnnl_f32;
  if (const char* name = std::getenv("SHAPEVM_BENCH_MATMUL_DTYPE"); name != nullptr && *name != '\0') {
    const std::string text = name;
    if (text == "bf16") {
      dtype = DType::BFloat16;
      dnnl_dtype = dnnl_bf16;
    } else if (text == "f16") {
      dtype = DType::Float16;
      dnnl_dtype = dnnl_f16;
    } else if (text != "f32") {
      return makeError(ErrorCode::InvalidArgument, "SHAPEVM_BENCH_MATMUL_DTYPE: '{}' is not f32, bf16 or f16", text);
    }
  }
  const bool narrow = dtype != DType::Float32;
  // Narrow outputs round to 2^-9 (bf16) or 2^-12 (f16) relative: 1e-2 in L2 means the product.
  const double tolerance = narrow ? 1e-2 : 1e-5;
  auto operand = [&](const Shape& shape, std::mt19937_64& rng) {
    Tensor f = randomTensor(shape, rng);
    if (!narrow) return Value::fromTensor(std::move(f));
    Tensor t = std::move(Tensor::empty(dtype, shape).value());
    for (std::int64_t i = 0; i < f.numel(); ++i) {
      t.data<std::uint16_t>()[i] =
          dtype == DType::BFloat16 ? floatToBf16(f.data<float>()[i]) : floatToHalf(f.data<float>()[i]);
    }
    return Value::fromTensor(std::move(t));
  };
  std::vector<jit::KernelParams> kernels;
  for (std::size_t at = 0; at <= list.size();) {
    const std::size_t end = std::min(list.find(';', at), list.size());
    SVM_ASSIGN_OR_RETURN(jit::KernelParams params, jit::KernelParams::parse(list.substr(at, end - at)));
    kernels.push_back(params);
    at = end + 1;
  }
  const char* rounds_text = std::getenv("SHAPEVM_BENCH_ROUNDS");
  const int rounds = std::max(3, rounds_text != nullptr ? std::atoi(rounds_text) : 11);
  std::mt19937_64 rng(5);
  for (const auto& [m, k, n] : shapes) {
    Value a = operand(Shape{m, k}, rng);
    Value b = operand(Shape{k, n}, rng);
    std::vector<const Value*> inputs = {&a, &b};
    const jit::KernelSpec base = jit::exactSpec(OpId::MatMul, {}, inputs);
    Tensor c = std::move(Tensor::empty(DType::Float32, Shape{m, n}).value());
    Tensor c2 = std::move(Tensor::empty(dtype, Shape{m, n}).value());
    Tensor c3 = std::move(Tensor::empty(dtype, Shape{m, n}).value());
    SVM_ASSIGN_OR_RETURN(auto primitive, OnednnMatmul::create(m, k, n, a.tensor().rawData(), b.tensor().rawData(),
                                                              c2.rawData(), dnnl_dtype));
    SVM_ASSIGN_OR_RETURN(auto again, OnednnMatmul::create(m, k, n, a.tensor().rawData(), b.tensor().rawData(),
                                                          c3.rawData(), dnnl_dtype));
    // The reference decides correctness (oneDNN's own output is what the others are timed against).
    std::vector<Value> reference(1);
    {
      const OpSchema& schema = OpRegistry::global().schema(OpId::MatMul);
      OpContext ctx{&schema, inputs, {}, reference};
      SVM_RETURN_IF_ERROR(invokeKernel(OpRegistry::global().resolve(OpId::MatMul, inputs), ctx));
    }
    primitive->run();
    const Tensor& want = reference[0].tensor();
    if (!(relL2(c2, want) <= tolerance)) {
      return makeError(ErrorCode::Internal, "matmul {}x{}x{}: oneDNN's primitive disagrees with the reference", m, k,
                       n);
    }
    // Timed in the rotated order: [0, kernels) the JIT's, then sgemm, the primitive, its twin.
    std::vector<std::function<void()>> runs;
    std::vector<std::unique_ptr<jit::CompiledKernel>> compiled;
    std::vector<std::vector<Value>> outs(kernels.size(), std::vector<Value>(1));
    for (std::size_t i = 0; i < kernels.size(); ++i) {
      jit::KernelSpec spec = base;
      spec.params = kernels[i];
      SVM_ASSIGN_OR_RETURN(auto kernel, jit::compileKernel(engine, family, spec));
      compiled.push_back(std::move(kernel));
      jit::CompiledKernel* kernel_ptr = compiled.back().get();
      std::vector<Value>* out_ptr = &outs[i];
      runs.push_back([kernel_ptr, out_ptr, &inputs] { (void)jit::invokeCompiled(*kernel_ptr, inputs, *out_ptr); });
      runs.back()();
      if (!(relL2((*out_ptr)[0].tensor(), want) <= tolerance)) {
        return makeError(ErrorCode::Internal, "matmul {}x{}x{}: {} gives wrong results", m, k, n,
                         kernels[i].toString());
      }
    }
    runs.push_back([&] {
      // No sgemm for narrow dtypes: the row repeats the primitive (its ratio is noise, not printed).
      if (narrow) return primitive->run();
      dnnl_sgemm('N', 'N', m, n, k, 1.0f, a.tensor().data<float>(), k, b.tensor().data<float>(), n, 0.0f,
                 c.data<float>(), n);
    });
    runs.push_back([&] { primitive->run(); });
    runs.push_back([&] { again->run(); });
    const double flop = 2.0 * static_cast<double>(m * k * n);
    const int repeats = std::max(3, static_cast<int>(std::min<double>(20, 1.5e9 / flop)));
    // Per round and kernel: the median of its calls (ms) and the fastest (fastest).
    std::vector<std::vector<double>> ms(runs.size()), fastest(runs.size());
    for (int round = 0; round < rounds; ++round) {
      for (std::size_t j = 0; j < runs.size(); ++j) {
        const std::size_t i = (j + static_cast<std::size_t>(round)) % runs.size();
        const auto [min_ms, median_ms] = minMedianCpuMs(repeats, runs[i]);
        fastest[i].push_back(min_ms);
        ms[i].push_back(median_ms);
      }
    }
    const std::size_t sgemm = kernels.size(), prim = sgemm + 1, twin = sgemm + 2;
    auto ratios = [&](std::size_t i, const std::vector<std::vector<double>>& t) {
      std::vector<double> r;
      for (int round = 0; round < rounds; ++round) {
        const std::size_t at = static_cast<std::size_t>(round);
        r.push_back((narrow ? t[prim][at] : std::min(t[sgemm][at], t[prim][at])) / t[i][at]);
      }
      std::sort(r.begin(), r.end());
      return r;
    };
    const double dnnl_ms = narrow ? summarizeLatency(ms[prim]).median
                                  : std::min(summarizeLatency(ms[sgemm]).median, summarizeLatency(ms[prim]).median);
    fmt::print("matmul {} {}x{}x{}: oneDNN {:.1f} GFLOP/s ({} rounds x {} calls, thread CPU time)\n", dtypeName(dtype),
               m, k, n, flop / (dnnl_ms * 1e6), rounds, repeats);
    // The ratio from each round's median call (rounds: min..max), then from its fastest call.
    auto row = [&](const std::string& name, std::size_t i) {
      const std::vector<double> r = ratios(i, ms);
      const std::vector<double> f = ratios(i, fastest);
      const double gflops = flop / (summarizeLatency(ms[i]).median * 1e6);
      fmt::print(
          "  {:<44} {:6.1f} GFLOP/s  {:.2f}x oneDNN (rounds {:.2f}..{:.2f}); fastest calls {:.2f}x ({:.2f}..{:.2f})\n",
          name, gflops, r[r.size() / 2], r.front(), r.back(), f[f.size() / 2], f.front(), f.back());
      out.push_back({{"m", m},
                     {"k", k},
                     {"n", n},
                     {"dtype", dtypeName(dtype)},
                     {"kernel", name},
                     {"gflops", gflops},
                     {"vs_onednn", r[r.size() / 2]},
                     {"vs_onednn_min", r.front()},
                     {"vs_onednn_max", r.back()},
                     {"vs_onednn_fastest", f[f.size() / 2]},
                     {"vs_onednn_fastest_min", f.front()},
                     {"vs_onednn_fastest_max", f.back()}});
    };
    for (std::size_t i = 0; i < kernels.size(); ++i) row(kernels[i].toString(), i);
    if (!narrow) row("oneDNN sgemm", sgemm);
    row("oneDNN matmul", prim);
    row("oneDNN again (noise floor)", twin);
    for (auto& kernel : compiled) (void)engine.free(kernel->handle);
  }
  return Status::ok();
}

// bfloat16 x bfloat16 -> bfloat16 at the suite's shapes: the default tile with the bf16 pair dot
// products (bf16dot=1, where the CPU has them) vs the same tile widening to float32 (bf16dot=-1)
// vs oneDNN's bf16 matmul primitive, the primitive as the JIT's library candidate and the
// AutoTuner's pick (both variants, the blockings and the library as candidates), interleaved;
// GFLOP/s also as a share of the float32 FMA peak. The tuner's measurements set the host's
// default variant (jit/bf16_variant.h), printed per row.
Status bf16MatmulRows(const BenchFlags& flags, jit::LlvmCpuBackend& engine, const jit::KernelFamily& family,
                      tune::AutoTuner& auto_tuner, std::span<const std::array<std::int64_t, 3>> shapes, double f32_peak,
                      json& out) {
  std::mt19937_64 rng(11);
  fmt::print("matmul bfloat16 (bf16 inputs and output, float32 accumulation): GFLOP/s\n");
  for (const auto& [m, k, n] : shapes) {
    auto bf16 = [&](const Shape& shape) {
      Tensor f = randomTensor(shape, rng);
      Tensor t = std::move(Tensor::empty(DType::BFloat16, shape).value());
      for (std::int64_t i = 0; i < f.numel(); ++i) t.data<std::uint16_t>()[i] = floatToBf16(f.data<float>()[i]);
      return Value::fromTensor(std::move(t));
    };
    Value a = bf16(Shape{m, k}), b = bf16(Shape{k, n});
    std::vector<const Value*> inputs = {&a, &b};
    std::vector<Value> want(1), pairs_out(1), wide_out(1);
    {
      const OpSchema& schema = OpRegistry::global().schema(OpId::MatMul);
      OpContext ctx{&schema, inputs, {}, want};
      SVM_RETURN_IF_ERROR(invokeKernel(OpRegistry::global().resolve(OpId::MatMul, inputs), ctx));
    }
    jit::KernelSpec spec = jit::exactSpec(OpId::MatMul, {}, inputs);
    spec.params.bf16_dot = 1;
    if (!family.supports(engine.targetSpec(spec)).isOk()) spec.params.bf16_dot = 0;  // no AVX512_BF16: widening
    SVM_ASSIGN_OR_RETURN(auto pairs, jit::compileKernel(engine, family, spec));
    spec.params.bf16_dot = -1;
    SVM_ASSIGN_OR_RETURN(auto wide, jit::compileKernel(engine, family, spec));
    Tensor c = std::move(Tensor::empty(DType::BFloat16, Shape{m, n}).value());
    // oneDNN has no bf16 matmul on a CPU without AVX-512 (its primitive_desc fails there): the row
    // then times the JIT alone and says so, rather than failing the suite.
    auto created = OnednnMatmul::create(m, k, n, a.tensor().rawData(), b.tensor().rawData(), c.rawData(), dnnl_bf16);
    std::unique_ptr<OnednnMatmul> primitive;
    if (created) {
      primitive = std::move(*created);
    } else {
      fmt::print("matmul bf16 {}x{}x{}: oneDNN has no bf16 matmul here ({}); JIT only\n", m, k, n,
                 created.status().toString());
    }
    // The same default kernel compiled twice: one packs B on every call (the suite's packed-weight
    // cache is off, like for like with oneDNN), the other keeps B's packing from its first call
    // (a weight reused across calls) through its own PackedOperandCache.
    spec.params = {};
    SVM_ASSIGN_OR_RETURN(auto packed_once, jit::compileKernel(engine, family, spec));
    // oneDNN's primitive as the JIT's library candidate: where oneDNN has no bf16 kernel for this
    // CPU, the compile fails with its reason (the tuner then keeps the generated kernel).
    jit::KernelSpec library_spec = spec;
    library_spec.params = jit::KernelParams{.library = 1};
    auto library = jit::compileKernel(engine, family, library_spec);
    std::vector<Value> library_out(1);
    auto runLibrary = [&] {
      if (library) (void)jit::invokeCompiled(**library, inputs, library_out);
    };
    runLibrary();
    if (library && !(relL2(library_out[0].tensor(), want[0].tensor()) <= 1e-2)) {
      return makeError(ErrorCode::Internal, "bf16 matmul {}x{}x{}: the library kernel gives wrong results", m, k, n);
    }
    // The AutoTuner's pick.
    SVM_ASSIGN_OR_RETURN(jit::TuneOutcome tuned, auto_tuner.tune(engine, family, spec, inputs));
    jit::KernelSpec auto_spec = spec;
    auto_spec.params = tuned.params;
    SVM_ASSIGN_OR_RETURN(auto picked, jit::compileKernel(engine, family, auto_spec));
    std::vector<Value> auto_out(1);
    auto runAuto = [&] { (void)jit::invokeCompiled(*picked, inputs, auto_out); };
    runAuto();
    if (!(relL2(auto_out[0].tensor(), want[0].tensor()) <= 1e-2)) {
      return makeError(ErrorCode::Internal, "bf16 matmul {}x{}x{}: the AutoTuner's pick {} gives wrong results", m, k,
                       n, tuned.params.toString());
    }
    std::vector<Value> once_out(1);
    auto runPairs = [&] { (void)jit::invokeCompiled(*pairs, inputs, pairs_out); };
    auto runWide = [&] { (void)jit::invokeCompiled(*wide, inputs, wide_out); };
    auto runDnnl = [&] {
      if (primitive) primitive->run();
    };
    auto runOnce = [&] {
      const std::int64_t saved = Tunables::get(Tunable::PackedWeightEntries);
      (void)Tunables::set(Tunable::PackedWeightEntries, 2);
      (void)jit::invokeCompiled(*packed_once, inputs, once_out);
      (void)Tunables::set(Tunable::PackedWeightEntries, saved);
    };
    // The library kernel with its B packed once into oneDNN's layout (onednn::packedB), as for a
    // weight: its own packed-operand cache, kept between these calls only.
    auto runLibraryOnce = [&] {
      const std::int64_t saved = Tunables::get(Tunable::PackedWeightEntries);
      (void)Tunables::set(Tunable::PackedWeightEntries, 2);
      if (library) (void)jit::invokeCompiled(**library, inputs, library_out);
      (void)Tunables::set(Tunable::PackedWeightEntries, saved);
    };
    runPairs();
    runWide();
    runDnnl();
    runOnce();
    runOnce();
    runLibraryOnce();
    if (library && !(relL2(library_out[0].tensor(), want[0].tensor()) <= 1e-2)) {
      return makeError(ErrorCode::Internal,
                       "bf16 matmul {}x{}x{}: the library kernel with B packed once: wrong results", m, k, n);
    }
    // Each output rounds to bfloat16 (2^-9 relative), so 1e-2 in L2 means every kernel computes
    // the product, in whatever order it sums.
    const double errors[] = {
        relL2(pairs_out[0].tensor(), want[0].tensor()), relL2(wide_out[0].tensor(), want[0].tensor()),
        primitive ? relL2(c, want[0].tensor()) : 0.0, relL2(once_out[0].tensor(), want[0].tensor())};
    for (double e : errors) {
      if (!(e <= 1e-2)) {
        return makeError(ErrorCode::Internal,
                         "bf16 matmul {}x{}x{}: rel L2 {:.3g} / {:.3g} / {:.3g} / {:.3g} (pairs / widening / "
                         "oneDNN / B packed once) vs the reference",
                         m, k, n, errors[0], errors[1], errors[2], errors[3]);
      }
    }
    const bool cache_hit = packed_once->packed.stats().hits > 0;
    const double flop = 2.0 * static_cast<double>(m * k * n);
    const int repeats = std::max(3, static_cast<int>(std::min<double>(flags.quick ? 10 : 40, 3e9 / flop)));
    std::vector<double> pairs_ms, wide_ms, dnnl_ms, once_ms, library_ms, library_once_ms, auto_ms;
    for (int round = 0; round < (flags.quick ? 3 : 5); ++round) {
      pairs_ms.push_back(medianCpuMs(repeats, runPairs));
      wide_ms.push_back(medianCpuMs(repeats, runWide));
      if (primitive) dnnl_ms.push_back(medianCpuMs(repeats, runDnnl));
      if (library) library_ms.push_back(medianCpuMs(repeats, runLibrary));
      if (library) library_once_ms.push_back(medianCpuMs(repeats, runLibraryOnce));
      once_ms.push_back(medianCpuMs(repeats, runOnce));
      auto_ms.push_back(medianCpuMs(repeats, runAuto));
    }
    auto gflops = [&](const std::vector<double>& ms) { return flop / (summarizeLatency(ms).median * 1e6); };
    const double pairs_g = gflops(pairs_ms), wide_g = gflops(wide_ms);
    const double dnnl_g = primitive ? gflops(dnnl_ms) : std::numeric_limits<double>::quiet_NaN();
    const double once_g = cache_hit ? gflops(once_ms) : 0.0;
    const bool used_pairs = pairs->handle.symbol.find("bf16pairs") != std::string::npos;
    const double auto_g = gflops(auto_ms);
    // Each kernel against oneDNN's primitive of its own round, then the median (see matmulSuite).
    auto vsOnednnPerRound = [&](const std::vector<double>& ms) {
      std::vector<double> ratios;
      for (std::size_t r = 0; r < ms.size() && r < dnnl_ms.size(); ++r) ratios.push_back(dnnl_ms[r] / ms[r]);
      return ratios.empty() ? std::numeric_limits<double>::quiet_NaN() : summarizeLatency(ratios).median;
    };
    const bool auto_pairs = picked->handle.symbol.find("bf16pairs") != std::string::npos;
    const char* host_default = jit::bf16VariantName(jit::bf16Default(engine.capabilities().target));
    out.push_back(
        {{"m", m},
         {"k", k},
         {"n", n},
         {"jit_gflops", pairs_g},
         {"jit_widening_gflops", wide_g},
         {"onednn_matmul_gflops", primitive ? json(dnnl_g) : json(nullptr)},
         {"jit_packed_once_gflops", once_g},
         {"library_gflops", library ? json(gflops(library_ms)) : json(nullptr)},
         {"library_packed_once_gflops", library ? json(gflops(library_once_ms)) : json(nullptr)},
         {"library_packed_once_vs_onednn_per_round",
          primitive && library ? json(vsOnednnPerRound(library_once_ms)) : json(nullptr)},
         {"f32_peak_gflops", f32_peak},
         {"bf16_pairs", used_pairs},
         {"auto_gflops", auto_g},
         {"auto_params", tuned.params.toString()},
         {"auto_impl", tuned.params.library != 0 ? std::string(tune::implName(tuned.params))
                       : auto_pairs              ? std::string("jit pairs")
                                                 : std::string("jit widening")},
         {"auto_vs_onednn_matmul", primitive ? json(auto_g / dnnl_g) : json(nullptr)},
         {"auto_vs_onednn_per_round", primitive ? json(vsOnednnPerRound(auto_ms)) : json(nullptr)},
         {"library_vs_onednn_per_round", primitive && library ? json(vsOnednnPerRound(library_ms)) : json(nullptr)},
         {"jit_vs_onednn_per_round", primitive ? json(vsOnednnPerRound(pairs_ms)) : json(nullptr)},
         {"host_default_after_tuning", host_default},
         {"rel_l2", errors[0]},
         {"rel_l2_widening", errors[1]},
         {"rel_l2_onednn", primitive ? json(errors[2]) : json(nullptr)}});
    fmt::print(
        "matmul bf16 {:>4}x{:>4}x{:>4}: JIT {:6.1f} ({}; {:.2f}x widening {:6.1f}, {:.2f}x oneDNN {:6.1f}; "
        "{:3.0f}% of the f32 FMA peak); B packed once {:6.1f} ({:.2f}x oneDNN)\n",
        m, k, n, pairs_g, used_pairs ? "bf16 pairs" : "widening", pairs_g / wide_g, wide_g, pairs_g / dnnl_g, dnnl_g,
        100.0 * pairs_g / f32_peak, once_g, once_g / dnnl_g);
    fmt::print(
        "                    AutoTuner: {:6.1f} ({:.2f}x oneDNN; {:3.0f}% of the f32 FMA peak) [{}, {}]; the host's "
        "default variant is now {}\n",
        auto_g, auto_g / dnnl_g, 100.0 * auto_g / f32_peak, tuned.params.toString(),
        tuned.params.library != 0 ? tune::implName(tuned.params)
        : auto_pairs              ? std::string_view("pairs")
                                  : std::string_view("widening"),
        host_default);
    (void)engine.free(picked->handle);
    if (library) {
      fmt::print(
          "                    library (oneDNN primitive as a JIT candidate): {:6.1f} ({:.2f}x oneDNN); median of "
          "per-round ratios: library {:.2f}x, AutoTuner {:.2f}x\n",
          gflops(library_ms), gflops(library_ms) / dnnl_g, vsOnednnPerRound(library_ms), vsOnednnPerRound(auto_ms));
      fmt::print(
          "                    library with B packed once (cached weight): {:6.1f} ({:.2f}x oneDNN; per round "
          "{:.2f}x)\n",
          gflops(library_once_ms), gflops(library_once_ms) / dnnl_g, vsOnednnPerRound(library_once_ms));
      (void)engine.free((*library)->handle);
    } else {
      fmt::print("                    library: n/a ({})\n", library.status().message());
    }
    (void)engine.free(pairs->handle);
    (void)engine.free(wide->handle);
    (void)engine.free(packed_once->handle);
  }
  return Status::ok();
}

// ---- elementwise ----

constexpr const char* kChainProgram = R"(.module "chain"
.func chain
  .param a : f32[?0]
  .param b : f32[?0]
  .param c : f32[?0]
  .outputs 1
  LoadTensor r0, a
  LoadTensor r1, b
  LoadTensor r2, c
  CallOp mul r3 = r0, r1 : f32[?0] x f32[?0] -> f32[?0]
  CallOp add r4 = r3, r2 : f32[?0] x f32[?0] -> f32[?0]
  CallOp sigmoid r5 = r4 : f32[?0] -> f32[?0]
  StoreTensor r5, o0
  Return
.end
)";

Status normalizationSuite(const BenchFlags& flags, double roof_gbps, json& out);

// ---- fused reductions and normalizations ----

// softmax / layer_norm of an elementwise producer over rows of 1024: at O2 the statistics are
// fused reductions of the producer (never stored) and the normalization's output is computed in
// its consumer's kernel. Effective GB/s counts one read of x and one write of y per element
// (the minimum any implementation moves), against the same one-pass roofline as the chain.
constexpr const char* kNormProgram = R"(.module "norms"
.func softmax
  .param x : f32[?0,1024]
  .param w : f32[1024]
  .param b : f32[1024]
  .outputs 1
  LoadTensor r0, x
  LoadTensor r1, w
  LoadTensor r2, b
  CallOp mul r3 = r0, r1 : f32[?0,1024] x f32[1024] -> f32[?0,1024]
  CallOp add r4 = r3, r2 : f32[?0,1024] x f32[1024] -> f32[?0,1024]
  CallOp softmax r5 = r4 {axis=-1} : f32[?0,1024] -> f32[?0,1024]
  StoreTensor r5, o0
  Return
.end
.func layer_norm
  .param x : f32[?0,1024]
  .param w : f32[1024]
  .param b : f32[1024]
  .outputs 1
  LoadTensor r0, x
  LoadTensor r1, w
  LoadTensor r2, b
  CallOp add r3 = r0, r2 : f32[?0,1024] x f32[1024] -> f32[?0,1024]
  CallOp layer_norm r4 = r3, r1, r2 {axis=-1, eps=1e-05} : f32[?0,1024] x f32[1024] x f32[1024] -> f32[?0,1024]
  CallOp relu r5 = r4 : f32[?0,1024] -> f32[?0,1024]
  StoreTensor r5, o0
  Return
.end
)";

Status normalizationSuite(const BenchFlags& flags, double roof_gbps, json& out) {
  const std::int64_t rows = flags.quick ? 256 : 4096;
  const std::int64_t n = rows * 1024;
  std::mt19937_64 rng(11);
  std::vector<Value> args = {Value::fromTensor(randomTensor(Shape{rows, 1024}, rng)),
                             Value::fromTensor(randomTensor(Shape{1024}, rng)),
                             Value::fromTensor(randomTensor(Shape{1024}, rng))};
  SVM_ASSIGN_OR_RETURN(std::unique_ptr<Session> listing, svasmSession(kNormProgram, "norms.svasm", 0));
  for (const FunctionInfo& function : listing->functions()) {
    const int fn = function.index;
    const std::string& name = function.name;
    SVM_ASSIGN_OR_RETURN(std::unique_ptr<Session> o0, svasmSession(kNormProgram, "norms.svasm", 0));
    SVM_ASSIGN_OR_RETURN(std::unique_ptr<Session> o1, svasmSession(kNormProgram, "norms.svasm", 1));
    SVM_ASSIGN_OR_RETURN(std::unique_ptr<Session> o2, svasmSession(kNormProgram, "norms.svasm", 2));
    // Until the region is hot and installed (the default thresholds; small inputs take more runs).
    for (int i = 0; i < 64 && (i < 8 || o2->stats().fused_regions == 0); ++i) {
      if (auto ran = o1->run(fn, args); !ran) return ran.status();
      if (auto ran = o2->run(fn, args); !ran) return ran.status();
    }
    if (o2->stats().fused_regions == 0) return makeError(ErrorCode::Internal, "{}: O2 installed no fused region", name);
    SVM_ASSIGN_OR_RETURN(std::vector<Value> want, o0->run(fn, args));
    SVM_ASSIGN_OR_RETURN(std::vector<Value> got1, o1->run(fn, args));
    SVM_ASSIGN_OR_RETURN(std::vector<Value> got2, o2->run(fn, args));
    if (relL2(got1[0].tensor(), want[0].tensor()) > 1e-5 || relL2(got2[0].tensor(), want[0].tensor()) > 1e-5) {
      return makeError(ErrorCode::Internal, "{}: O1/O2 differ from O0", name);
    }
    std::vector<double> o2_ms, o1_ms, o0_ms;
    const int repeats = flags.quick ? 5 : 9;
    for (int round = 0; round < (flags.quick ? 3 : 5); ++round) {
      o2_ms.push_back(medianMs(repeats, [&] { (void)o2->run(fn, args); }));
      o1_ms.push_back(medianMs(repeats, [&] { (void)o1->run(fn, args); }));
      o0_ms.push_back(medianMs(repeats, [&] { (void)o0->run(fn, args); }));
    }
    const double bytes = 8.0 * static_cast<double>(n);
    const double t2 = summarizeLatency(o2_ms).median, t1 = summarizeLatency(o1_ms).median,
                 t0 = summarizeLatency(o0_ms).median;
    const double gbps = bytes / (t2 * 1e6);
    out.push_back({{"op", name},
                   {"rows", rows},
                   {"cols", 1024},
                   {"o2_ms", t2},
                   {"o1_ms", t1},
                   {"o0_ms", t0},
                   {"o2_gbps", gbps},
                   {"roofline_gbps", roof_gbps}});
    fmt::print(
        "fused {} of an elementwise producer over [{},1024] f32: O2 {:.3f} ms ({:.1f} GB/s effective = {:.0f}% of the "
        "one-pass roofline), O1 {:.3f} ms ({:.2f}x O2), O0 {:.3f} ms ({:.2f}x O2)\n",
        name, rows, t2, gbps, 100.0 * gbps / roof_gbps, t1, t1 / t2, t0, t0 / t2);
  }
  return Status::ok();
}

}  // namespace

Status matmulSuite(const BenchFlags& flags, jit::LlvmCpuBackend& engine, const std::string& tmp_dir, json& out,
                   json& out_bf16) {
  SVM_ASSIGN_OR_RETURN(std::unique_ptr<PeakMeter> meter, PeakMeter::create(engine.engine()));
  // Tuning quality: the AutoTuner as O2 runs it (its default budget, TuneBudgetMs; repeats and
  // sample length from the tunables) on the same spec, with one fresh database for the suite, so
  // its predictor may order candidates by the earlier shapes' winners as it would in use.
  tune::AutoTunerOptions auto_options;
  auto_options.database_path = tmp_dir + "/matmul/tuning.jsonl";
  tune::AutoTuner auto_tuner(auto_options);
  // Like for like with oneDNN, which packs B on every call: the JIT's packed-weight cache is off
  // for every figure but the "B packed once" one (a weight reused across calls, as in the loop).
  struct RestoreEntries {
    std::int64_t saved = Tunables::get(Tunable::PackedWeightEntries);
    ~RestoreEntries() { (void)Tunables::set(Tunable::PackedWeightEntries, saved); }
  } restore_entries;
  SVM_RETURN_IF_ERROR(Tunables::set(Tunable::PackedWeightEntries, 0));
  const unsigned lanes = meter->lanes();
  double overall_peak = 0;
  // One thread for the one-thread rows on both sides: OpenMP's default is every CPU, so the direct
  // oneDNN calls (sgemm, primitive) of the first shape split across all cores while the JIT and
  // its library kernel ran on one (KernelThreads=1): the ratios said "oneDNN" for two threads.
  omp_set_num_threads(1);

  struct MatmulShape {
    std::int64_t m, k, n;
  };
  // The issue's shapes, then the reference workload's (seq 10/20/120 x batch 32 rows).
  std::vector<MatmulShape> shapes = {{640, 128, 1024}, {32, 768, 4096},   {256, 256, 256}, {1024, 1024, 1024},
                                     {320, 128, 1024}, {3840, 128, 1024}, {32, 256, 1024}};
  if (flags.quick) shapes = {{640, 128, 1024}, {256, 256, 256}, {32, 256, 1024}};
  // SHAPEVM_BENCH_MATMUL_SHAPES=MxKxN,... : only these shapes (for working on one kernel).
  if (const char* only = std::getenv("SHAPEVM_BENCH_MATMUL_SHAPES"); only != nullptr && *only != '\0') {
    shapes.clear();
    std::string list = only;
    for (std::size_t at = 0; at <= list.size();) {
      const std::size_t end = std::min(list.find(',', at), list.size());
      MatmulShape s{};
      const std::string item = list.substr(at, end - at);
      if (std::sscanf(item.c_str(), "%ldx%ldx%ld", &s.m, &s.k, &s.n) != 3 || s.m <= 0 || s.k <= 0 || s.n <= 0) {
        return makeError(ErrorCode::InvalidArgument, "SHAPEVM_BENCH_MATMUL_SHAPES: '{}' is not MxKxN (positive)", item);
      }
      shapes.push_back(s);
      at = end + 1;
    }
  }
  const jit::KernelFamily* family = jit::familyFor(OpId::MatMul);
  if (family == nullptr) return makeError(ErrorCode::Unsupported, "no JIT matmul family");
  if (const char* compare = std::getenv("SHAPEVM_BENCH_MATMUL_COMPARE"); compare != nullptr && *compare != '\0') {
    fmt::print("host: {}; {}\n", engine.capabilities().toString(), engine.costHints().toString());
    std::vector<std::array<std::int64_t, 3>> listed;
    for (const MatmulShape& s : shapes) listed.push_back({s.m, s.k, s.n});
    return matmulCompare(engine, *family, listed, compare, out);
  }
  std::mt19937_64 rng(5);
  fmt::print("matmul: GFLOP/s (% of the FMA peak measured beside it); ratios vs the faster of oneDNN sgemm / matmul\n");
  fmt::print("host: {}; {}\n", engine.capabilities().toString(), engine.costHints().toString());
  for (const MatmulShape& s : shapes) {
    Value a = Value::fromTensor(randomTensor(Shape{s.m, s.k}, rng));
    Value b = Value::fromTensor(randomTensor(Shape{s.k, s.n}, rng));
    std::vector<const Value*> inputs = {&a, &b};
    const KernelEntry& reference = OpRegistry::global().resolve(OpId::MatMul, inputs);
    const OpSchema& schema = OpRegistry::global().schema(OpId::MatMul);
    std::vector<Value> ref_out(1), jit_out(1), best_out(1);
    auto runReference = [&] {
      OpContext ctx{&schema, inputs, {}, ref_out};
      (void)invokeKernel(reference, ctx);
    };
    runReference();
    const Tensor& want = ref_out[0].tensor();
    const jit::KernelSpec spec = jit::exactSpec(OpId::MatMul, {}, inputs);
    SVM_ASSIGN_OR_RETURN(auto kernel, jit::compileKernel(engine, *family, spec));
    auto runJit = [&] { (void)jit::invokeCompiled(*kernel, inputs, jit_out); };
    Tensor c = std::move(Tensor::empty(DType::Float32, Shape{s.m, s.n}).value());
    Tensor c2 = std::move(Tensor::empty(DType::Float32, Shape{s.m, s.n}).value());
    auto runSgemm = [&] {
      dnnl_sgemm('N', 'N', s.m, s.n, s.k, 1.0f, a.tensor().data<float>(), s.k, b.tensor().data<float>(), s.n, 0.0f,
                 c.data<float>(), s.n);
    };
    SVM_ASSIGN_OR_RETURN(auto primitive, OnednnMatmul::create(s.m, s.k, s.n, a.tensor().data<float>(),
                                                              b.tensor().data<float>(), c2.data<float>()));
    auto runPrimitive = [&] { primitive->run(); };
    runJit();
    runSgemm();
    runPrimitive();
    const double jit_err = relL2(jit_out[0].tensor(), want);
    const double dnnl_err = std::max(relL2(c, want), relL2(c2, want));
    if (!(jit_err <= 1e-5) || !(dnnl_err <= 1e-5)) {
      return makeError(ErrorCode::Internal, "matmul {}x{}x{}: JIT rel L2 {:.3g}, oneDNN rel L2 {:.3g} vs the reference",
                       s.m, s.k, s.n, jit_err, dnnl_err);
    }
    const double flop = 2.0 * static_cast<double>(s.m * s.k * s.n);
    const int repeats = std::max(3, static_cast<int>(std::min<double>(flags.quick ? 10 : 40, 3e9 / flop)));
    SVM_ASSIGN_OR_RETURN(TunedMatmul tuned, tuneMatmul(engine, *family, spec, inputs, want, std::max(3, repeats / 4)));
    auto runBest = [&] { (void)jit::invokeCompiled(*tuned.kernel, inputs, best_out); };
    SVM_ASSIGN_OR_RETURN(jit::TuneOutcome auto_outcome, auto_tuner.tune(engine, *family, spec, inputs));
    jit::KernelSpec auto_spec = spec;
    auto_spec.params = auto_outcome.params;
    SVM_ASSIGN_OR_RETURN(auto auto_kernel, jit::compileKernel(engine, *family, auto_spec));
    std::vector<Value> auto_out(1);
    auto runAuto = [&] { (void)jit::invokeCompiled(*auto_kernel, inputs, auto_out); };
    runAuto();
    if (!(relL2(auto_out[0].tensor(), want) <= 1e-5)) {
      return makeError(ErrorCode::Internal, "matmul {}x{}x{}: the AutoTuner's choice {} gives wrong results", s.m, s.k,
                       s.n, auto_outcome.params.toString());
    }
    // oneDNN's primitive as the JIT's library candidate (impl=onednn): the same primitive behind the
    // kernel ABI, its prepare and validation; "n/a" where LibraryCandidates=0.
    jit::KernelSpec library_spec = spec;
    library_spec.params = jit::KernelParams{.library = 1};
    auto library = jit::compileKernel(engine, *family, library_spec);
    std::vector<Value> library_out(1);
    auto runLibrary = [&] {
      if (library) (void)jit::invokeCompiled(**library, inputs, library_out);
    };
    runLibrary();
    if (library && !(relL2(library_out[0].tensor(), want) <= 1e-5)) {
      return makeError(ErrorCode::Internal, "matmul {}x{}x{}: the library kernel gives wrong results", s.m, s.k, s.n);
    }
    // oneDNN's dnnl_sgemm as the JIT's library candidate (impl=sgemm).
    library_spec.params = jit::KernelParams{.library = 3};
    auto library_sgemm = jit::compileKernel(engine, *family, library_spec);
    std::vector<Value> library_sgemm_out(1);
    auto runLibrarySgemm = [&] {
      if (library_sgemm) (void)jit::invokeCompiled(**library_sgemm, inputs, library_sgemm_out);
    };
    runLibrarySgemm();
    if (library_sgemm && !(relL2(library_sgemm_out[0].tensor(), want) <= 1e-5)) {
      return makeError(ErrorCode::Internal, "matmul {}x{}x{}: the sgemm library kernel gives wrong results", s.m, s.k,
                       s.n);
    }
    std::vector<double> jit_ms, best_ms, ref_ms, sgemm_ms, prim_ms, auto_ms, library_ms, library_sgemm_ms;
    double peak = 0;
    const bool time_reference = flop <= 1e9;                       // the reference kernel takes seconds beyond this
    for (int round = 0; round < (flags.quick ? 3 : 5); ++round) {  // interleaved rounds
      peak = std::max(peak, meter->measure());
      jit_ms.push_back(medianCpuMs(repeats, runJit));
      best_ms.push_back(medianCpuMs(repeats, runBest));
      auto_ms.push_back(medianCpuMs(repeats, runAuto));
      sgemm_ms.push_back(medianCpuMs(repeats, runSgemm));
      prim_ms.push_back(medianCpuMs(repeats, runPrimitive));
      if (library) library_ms.push_back(medianCpuMs(repeats, runLibrary));
      if (library_sgemm) library_sgemm_ms.push_back(medianCpuMs(repeats, runLibrarySgemm));
      if (time_reference) ref_ms.push_back(medianCpuMs(std::min(repeats, 5), runReference));
    }
    auto gflops = [&](const std::vector<double>& ms) { return flop / (summarizeLatency(ms).median * 1e6); };
    const double jit_g = gflops(jit_ms), best_g = gflops(best_ms), auto_g = gflops(auto_ms), sgemm_g = gflops(sgemm_ms),
                 prim_g = gflops(prim_ms), ref_g = time_reference ? gflops(ref_ms) : 0.0;
    const double library_g = library ? gflops(library_ms) : 0.0;
    const double library_sgemm_g = library_sgemm ? gflops(library_sgemm_ms) : 0.0;
    // The default kernel with its B packed once and cached (the first call packs; a weight).
    SVM_RETURN_IF_ERROR(
        Tunables::set(Tunable::PackedWeightEntries, restore_entries.saved > 0 ? restore_entries.saved : 2));
    runJit();
    std::vector<double> cached_ms;
    for (int round = 0; round < (flags.quick ? 2 : 3); ++round) cached_ms.push_back(medianCpuMs(repeats, runJit));
    if (!(relL2(jit_out[0].tensor(), want) <= 1e-5)) {
      return makeError(ErrorCode::Internal, "matmul {}x{}x{} with B packed once: wrong results", s.m, s.k, s.n);
    }
    const bool cache_hit = kernel->packed.stats().hits > 0;
    kernel->packed.clear();
    // The primitive candidate with its B packed once into oneDNN's layout (onednn::packedB), as
    // for a weight: the direct calls above copy B on every call.
    std::vector<double> library_packed_ms;
    bool library_hit = false;
    if (library) {
      runLibrary();
      for (int round = 0; round < (flags.quick ? 2 : 3); ++round)
        library_packed_ms.push_back(medianCpuMs(repeats, runLibrary));
      if (!(relL2(library_out[0].tensor(), want) <= 1e-5)) {
        return makeError(ErrorCode::Internal, "matmul {}x{}x{}: the library kernel with B packed once: wrong results",
                         s.m, s.k, s.n);
      }
      library_hit = (*library)->packed.stats().hits > 0;
      (*library)->packed.clear();
    }
    SVM_RETURN_IF_ERROR(Tunables::set(Tunable::PackedWeightEntries, 0));
    const double cached_g = cache_hit ? gflops(cached_ms) : 0.0;
    const double library_packed_g = library_hit ? gflops(library_packed_ms) : 0.0;
    const double dnnl_g = std::max(sgemm_g, prim_g);
    // The same ratio round by round (each kernel against the faster oneDNN call of its own round,
    // timed within a second of it), then the median: the host's load moves between rounds.
    auto vsOnednnPerRound = [&](const std::vector<double>& ms) {
      std::vector<double> ratios;
      for (std::size_t r = 0; r < ms.size(); ++r) ratios.push_back(std::min(sgemm_ms[r], prim_ms[r]) / ms[r]);
      return summarizeLatency(ratios).median;
    };
    // The clock drifts and other processes share the core: % of peak uses the best peak seen so far.
    overall_peak = std::max(overall_peak, peak);
    peak = overall_peak;

    // Two threads: the tuned parameters with threads=2 vs oneDNN's matmul with two OpenMP threads.
    jit::KernelSpec spec2 = tuned.kernel->spec;
    spec2.params.threads = 2;
    SVM_ASSIGN_OR_RETURN(auto kernel2, jit::compileKernel(engine, *family, spec2));
    std::vector<Value> out2(1);
    auto runJit2 = [&] { (void)jit::invokeCompiled(*kernel2, inputs, out2); };
    runJit2();
    if (!(relL2(out2[0].tensor(), want) <= 1e-5)) {
      return makeError(ErrorCode::Internal, "matmul {}x{}x{} with 2 threads: wrong results", s.m, s.k, s.n);
    }
    omp_set_num_threads(2);
    SVM_ASSIGN_OR_RETURN(auto primitive2, OnednnMatmul::create(s.m, s.k, s.n, a.tensor().data<float>(),
                                                               b.tensor().data<float>(), c2.data<float>()));
    std::vector<double> jit2_ms, prim2_ms;
    // libgomp's idle threads spin for milliseconds after a parallel region (OMP_WAIT_POLICY
    // unset), and on two vCPUs such a spinning thread takes the core the JIT's second worker
    // needs: timed right after oneDNN, 256^3 ran no faster with two threads than with one (231
    // vs 439 GFLOP/s with OMP_WAIT_POLICY=passive). Each side gets the cores to itself: a pause
    // before every round lets the other side's threads go to sleep first.
    auto quiet = [] { std::this_thread::sleep_for(std::chrono::milliseconds(50)); };
    for (int round = 0; round < (flags.quick ? 2 : 3); ++round) {
      quiet();
      jit2_ms.push_back(medianMs(repeats, runJit2));
      quiet();
      prim2_ms.push_back(medianMs(repeats, [&] { primitive2->run(); }));
    }
    omp_set_num_threads(1);
    const double jit2_g = gflops(jit2_ms), prim2_g = gflops(prim2_ms);
    (void)engine.free(kernel2->handle);

    const std::string best_params = tuned.kernel->spec.params.toString();
    out.push_back(
        {{"m", s.m},
         {"k", s.k},
         {"n", s.n},
         {"jit_gflops", jit_g},
         {"jit_best_gflops", best_g},
         {"jit_best_params", best_params},
         {"candidates", tuned.candidates},
         {"tune_s", tuned.tune_s},
         {"reference_gflops", ref_g},
         {"onednn_gflops", dnnl_g},
         {"onednn_sgemm_gflops", sgemm_g},
         {"onednn_matmul_gflops", prim_g},
         {"peak_gflops", peak},
         {"jit_2t_gflops", jit2_g},
         {"onednn_matmul_2t_gflops", prim2_g},
         {"jit_level", "O1"},
         {"auto_gflops", auto_g},
         {"auto_params", auto_outcome.params.toString()},
         {"auto_impl", std::string(tune::implName(auto_outcome.params))},
         {"library_gflops", library ? json(library_g) : json(nullptr)},
         {"library_sgemm_gflops", library_sgemm ? json(library_sgemm_g) : json(nullptr)},
         {"auto_vs_onednn_matmul", auto_g / prim_g},
         {"auto_vs_onednn_per_round", vsOnednnPerRound(auto_ms)},
         {"jit_vs_onednn_per_round", vsOnednnPerRound(jit_ms)},
         {"jit_best_vs_onednn_per_round", vsOnednnPerRound(best_ms)},
         {"library_vs_onednn_per_round", library ? json(vsOnednnPerRound(library_ms)) : json(nullptr)},
         {"library_sgemm_vs_onednn_per_round",
          library_sgemm ? json(vsOnednnPerRound(library_sgemm_ms)) : json(nullptr)},
         {"auto_tuning_ms", auto_outcome.tuning_ms},
         {"auto_timed", auto_outcome.timed},
         {"auto_failed", auto_outcome.failed},
         {"auto_candidates", auto_outcome.candidates},
         {"auto_from_database", auto_outcome.from_database},
         {"auto_budget_ms", Tunables::get(Tunable::TuneBudgetMs)},
         {"auto_vs_best", auto_g / best_g},
         {"auto_vs_default", auto_g / jit_g},
         {"auto_own_speedup", auto_outcome.best_us > 0 ? auto_outcome.default_us / auto_outcome.best_us : 0.0},
         {"jit_packed_once_gflops", cached_g},
         {"library_packed_once_gflops", library_packed_g}});
    fmt::print(
        "matmul {:>4}x{:>4}x{:>4}: JIT default {:6.1f} ({:3.0f}%, {:.2f}x)  best {:6.1f} ({:3.0f}%, {:.2f}x) [{}]\n",
        s.m, s.k, s.n, jit_g, 100.0 * jit_g / peak, jit_g / dnnl_g, best_g, 100.0 * best_g / peak, best_g / dnnl_g,
        best_params);
    fmt::print(
        "                    oneDNN sgemm {:6.1f}, matmul {:6.1f}; reference {:6.1f}; peak {:.1f}; "
        "tuned {} candidates in {:.1f} s\n",
        sgemm_g, prim_g, ref_g, peak, tuned.candidates, tuned.tune_s);
    fmt::print("                    2 threads: JIT {:6.1f}, oneDNN matmul {:6.1f} ({:.2f}x)\n", jit2_g, prim2_g,
               jit2_g / prim2_g);
    if (library) {
      fmt::print(
          "                    library (oneDNN primitive as a JIT candidate): {:6.1f} ({:3.0f}%, {:.2f}x oneDNN)\n",
          library_g, 100.0 * library_g / peak, library_g / dnnl_g);
    } else {
      fmt::print("                    library: n/a ({})\n", library.status().message());
    }
    if (library_sgemm) {
      fmt::print("                    library (oneDNN sgemm as a JIT candidate): {:6.1f} ({:3.0f}%, {:.2f}x oneDNN)\n",
                 library_sgemm_g, 100.0 * library_sgemm_g / peak, library_sgemm_g / dnnl_g);
    }
    if (cached_g > 0) {
      fmt::print(
          "                    JIT default with B packed once (cached weight): {:6.1f} ({:3.0f}%, {:.2f}x oneDNN)\n",
          cached_g, 100.0 * cached_g / peak, cached_g / dnnl_g);
    }
    if (library_packed_g > 0) {
      fmt::print(
          "                    library primitive with B packed once (cached weight): {:6.1f} ({:3.0f}%, {:.2f}x "
          "oneDNN)\n",
          library_packed_g, 100.0 * library_packed_g / peak, library_packed_g / dnnl_g);
    }
    if (const std::vector<tune::TuneReport> reports = auto_tuner.reports();
        !reports.empty() && reports.back().runoff.has_value()) {
      const tune::RunOff& runoff = *reports.back().runoff;
      fmt::print("                    AutoTuner run-off ({} rounds, {}): {} {:.1f} us vs {} {:.1f} us{}\n",
                 runoff.rounds, runoff.cpu_clock ? "thread CPU, median" : "wall, fastest", runoff.generated.toString(),
                 runoff.generated_us, runoff.library.toString(), runoff.library_us,
                 runoff.decider_rounds > 0
                     ? fmt::format("; a close call: {} more rounds decided", runoff.decider_rounds)
                     : std::string());
    }
    fmt::print(
        "                    AutoTuner (budget {} ms): {} of {} candidates in {:.0f} ms -> {:6.1f} = {:.2f}x the "
        "exhaustive best, {:.2f}x the default, {:.2f}x oneDNN ({:.0f}% of peak) [{}]\n",
        Tunables::get(Tunable::TuneBudgetMs), auto_outcome.timed, auto_outcome.candidates, auto_outcome.tuning_ms,
        auto_g, auto_g / best_g, auto_g / jit_g, auto_g / dnnl_g, 100.0 * auto_g / peak,
        auto_outcome.params.toString());
    fmt::print(
        "                    vs oneDNN, median of per-round ratios: JIT default {:.2f}x, best {:.2f}x, library "
        "{:.2f}x, sgemm {:.2f}x, AutoTuner {:.2f}x\n",
        vsOnednnPerRound(jit_ms), vsOnednnPerRound(best_ms), library ? vsOnednnPerRound(library_ms) : 0.0,
        library_sgemm ? vsOnednnPerRound(library_sgemm_ms) : 0.0, vsOnednnPerRound(auto_ms));
    (void)engine.free(kernel->handle);
    (void)engine.free(tuned.kernel->handle);
    (void)engine.free(auto_kernel->handle);
    if (library) (void)engine.free((*library)->handle);
    if (library_sgemm) (void)engine.free((*library_sgemm)->handle);
    overall_peak = std::max(overall_peak, peak);
  }
  fmt::print("FMA peak (one core, {}-lane FMA, best of 8..24 independent chains): {:.1f} GFLOP/s\n", lanes,
             overall_peak);
  std::vector<std::array<std::int64_t, 3>> bf16_shapes;
  for (const MatmulShape& s : shapes) bf16_shapes.push_back({s.m, s.k, s.n});
  SVM_RETURN_IF_ERROR(bf16MatmulRows(flags, engine, *family, auto_tuner, bf16_shapes, overall_peak, out_bf16));
  return Status::ok();
}

Status elementwiseSuite(const BenchFlags& flags, jit::JitEngine& engine, json& out, json& norms) {
  const std::int64_t n = flags.quick ? (1 << 20) : (1 << 24);
  std::mt19937_64 rng(9);
  std::vector<Value> args = {Value::fromTensor(randomTensor(Shape{n}, rng)),
                             Value::fromTensor(randomTensor(Shape{n}, rng)),
                             Value::fromTensor(randomTensor(Shape{n}, rng))};
  SVM_ASSIGN_OR_RETURN(std::unique_ptr<Session> o0, svasmSession(kChainProgram, "chain.svasm", 0));
  SVM_ASSIGN_OR_RETURN(std::unique_ptr<Session> o1, svasmSession(kChainProgram, "chain.svasm", 1));
  SVM_ASSIGN_OR_RETURN(std::unique_ptr<Session> o2, svasmSession(kChainProgram, "chain.svasm", 2));
  for (int i = 0; i < 8; ++i) {
    if (auto ran = o1->run(0, args); !ran) return ran.status();
    if (auto ran = o2->run(0, args); !ran) return ran.status();
  }
  if (o2->stats().fused_regions == 0)
    return makeError(ErrorCode::Internal, "elementwise chain: O2 installed no fused region");
  SVM_ASSIGN_OR_RETURN(std::vector<Value> want, o0->run(0, args));
  SVM_ASSIGN_OR_RETURN(std::vector<Value> got, o1->run(0, args));
  SVM_ASSIGN_OR_RETURN(std::vector<Value> got2, o2->run(0, args));
  if (relL2(got[0].tensor(), want[0].tensor()) > 1e-5)
    return makeError(ErrorCode::Internal, "elementwise chain: O1 differs from O0");
  if (relL2(got2[0].tensor(), want[0].tensor()) > 1e-5)
    return makeError(ErrorCode::Internal, "elementwise chain: O2 differs from O0");
  SVM_ASSIGN_OR_RETURN(jit::KernelHandle axpy,
                       engine.compile("svm_bench_axpy", [](llvm::Module& m) { return emitAxpy(m, "svm_bench_axpy"); }));
  Tensor y = std::move(Tensor::empty(DType::Float32, Shape{n}).value());
  jit::KernelArgs axpy_args{};
  for (int i = 0; i < 3; ++i) axpy_args.data[i] = args[static_cast<std::size_t>(i)].tensor().rawData();
  axpy_args.data[3] = y.rawData();
  axpy_args.shape[0][0] = n;
  auto axpy_fn = reinterpret_cast<jit::GeneratedKernelFn>(axpy.address);
  std::vector<float> copy_dst(static_cast<std::size_t>(n));
  std::vector<double> o2_ms, o1_ms, o0_ms, axpy_ms, copy_ms;
  const int repeats = flags.quick ? 5 : 9;
  for (int round = 0; round < (flags.quick ? 3 : 5); ++round) {
    o2_ms.push_back(medianMs(repeats, [&] { (void)o2->run(0, args); }));
    o1_ms.push_back(medianMs(repeats, [&] { (void)o1->run(0, args); }));
    o0_ms.push_back(medianMs(repeats, [&] { (void)o0->run(0, args); }));
    axpy_ms.push_back(medianMs(repeats, [&] { axpy_fn(&axpy_args); }));
    copy_ms.push_back(medianMs(
        repeats, [&] { std::memcpy(copy_dst.data(), args[0].tensor().rawData(), static_cast<std::size_t>(n) * 4); }));
  }
  const double bytes = 16.0 * static_cast<double>(n);  // 3 inputs + 1 output, one pass
  const double chain2 = bytes / (summarizeLatency(o2_ms).median * 1e6);
  const double chain = bytes / (summarizeLatency(o1_ms).median * 1e6);
  const double chain0 = bytes / (summarizeLatency(o0_ms).median * 1e6);
  const double roof = bytes / (summarizeLatency(axpy_ms).median * 1e6);
  const double copy = 8.0 * static_cast<double>(n) / (summarizeLatency(copy_ms).median * 1e6);
  out.push_back({{"n", n},
                 {"chain", "sigmoid(a*b+c)"},
                 {"level", "O2"},
                 {"chain_o2_gbps", chain2},
                 {"chain_gbps", chain},
                 {"chain_o0_gbps", chain0},
                 {"axpy_gbps", roof},
                 {"memcpy_gbps", copy},
                 {"chain_o2_ms", summarizeLatency(o2_ms).median},
                 {"chain_ms", summarizeLatency(o1_ms).median},
                 {"axpy_ms", summarizeLatency(axpy_ms).median}});
  fmt::print(
      "elementwise sigmoid(a*b+c) over {} f32: O2 (fused) {:.1f} GB/s effective = {:.0f}% of the one-pass y=a*b+c "
      "roofline {:.1f} GB/s; O1 {:.1f} ({:.0f}%), O0 {:.1f}; memcpy {:.1f} GB/s\n",
      n, chain2, 100.0 * chain2 / roof, roof, chain, 100.0 * chain / roof, chain0, copy);
  (void)engine.remove(axpy);
  return normalizationSuite(flags, roof, norms);
}

// ---- per-op overhead ----

Status overheadSuite(const BenchFlags& flags, json& out) {
  std::string text = ".module \"overhead\"\n.func f\n  .param a : f32[1]\n  .outputs 1\n  LoadTensor r0, a\n";
  const int ops = 64;
  for (int i = 0; i < ops; ++i)
    text += fmt::format("  CallOp add r{} = r{}, r0 : f32[1] x f32[1] -> f32[1]\n", i + 1, i);
  text += fmt::format("  StoreTensor r{}, o0\n  Return\n.end\n", ops);
  SVM_ASSIGN_OR_RETURN(Module parsed, assemble(text, "overhead.svasm"));
  auto module = std::make_shared<Module>(std::move(parsed));
  for (bool profile : {true, false}) {
    VmOptions options;
    options.profile = profile;
    VirtualMachine vm(module, options);
    std::vector<Value> args = {Value::fromTensor(std::move(Tensor::empty(DType::Float32, Shape{1}).value()))};
    args[0].tensor().data<float>()[0] = 1.0f;
    for (int i = 0; i < 100; ++i) (void)vm.run(0, args);
    std::vector<double> per_op;
    const int calls = flags.quick ? 200 : 2000;
    for (int round = 0; round < 7; ++round) {
      const Clock::time_point start = Clock::now();
      for (int i = 0; i < calls; ++i) (void)vm.run(0, args);
      per_op.push_back(msSince(start) * 1e6 / (static_cast<double>(calls) * ops));
    }
    const double ns = summarizeLatency(per_op).median;
    out.push_back(
        {{"what", fmt::format("CallOp add 1-elem f32 ({})", profile ? "profiled" : "unprofiled")}, {"ns", ns}});
    fmt::print("per-op overhead, CallOp add on 1-element f32, {}: {:.1f} ns/op\n", profile ? "profiled" : "unprofiled",
               ns);
  }
  return Status::ok();
}

}  // namespace shapevm::bench
