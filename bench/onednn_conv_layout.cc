// SPDX-License-Identifier: Apache-2.0
// oneDNN's f32 convolution primitive on one core at bench/conv_layers.py's ResNet-style layers,
// three ways, in the calling thread's CPU time: on plain NCHW tensors as ShapeVM stores them (what
// the conv family's library candidate runs, library_onednn_conv.h); on the layouts oneDNN picks
// (format any) with the input and the weight reordered into them and the output back on every
// call (a weight may change between calls, so its reordered copy cannot be kept); and on those
// layouts with everything reordered once (the primitive alone: the ceiling). It prints the
// implementation oneDNN chose for each. Issue 21: which layout the library candidate uses.
// --stages: resnet18's 3x3 convs at the stage sizes of a small (116) and a median (232) image of
// bench/conv_layers.py's stream, each on the plain layouts, on oneDNN's pick and on channel blocks
// of 16, with the weight warm (the same call repeated) and cold (a 128 MiB buffer read between
// calls, as the rest of an image does), against reading the weight's bytes alone: whether the
// small images' fixed cost is the weights' bandwidth (issue 21, "The fixed cost per image"). With
// OMP_NUM_THREADS above 1 it times wall clock (the read stays on one thread).
// Built as build/bench/svm_bench_onednn_conv_layout; run with
//   OMP_NUM_THREADS=1 build/bench/svm_bench_onednn_conv_layout [--stages]
#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <unordered_map>
#include <vector>

#include "cpu_timing.h"

namespace {

using shapevm::bench::medianCallSeconds;

template <typename Call>
double medianMs(const Call& call, int calls, int rounds) {
  return medianCallSeconds(call, calls, rounds) * 1e3;
}

struct Layer {
  const char* name;
  dnnl::memory::dim cin, cout, kernel, stride, pad, groups, side;
};

// The seconds --stages times calls by: the calling thread's CPU time, or wall time with more than
// one OpenMP thread (OMP_NUM_THREADS), whose other threads' work the calling thread's clock misses.
double stageSeconds() {
  static const bool wall = [] {
    const char* threads = std::getenv("OMP_NUM_THREADS");
    return threads != nullptr && std::atoi(threads) > 1;
  }();
  if (!wall) return shapevm::bench::threadSeconds();
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Median of `rounds` single calls in stageSeconds(), `before` run untimed ahead of each.
template <typename Call, typename Before>
double medianSingleMs(const Call& call, const Before& before, int rounds) {
  std::vector<double> times;
  for (int r = 0; r < rounds; ++r) {
    before();
    const double start = stageSeconds();
    call();
    times.push_back(stageSeconds() - start);
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2] * 1e3;
}

// Reads `bytes` at `data` (a float sum the compiler cannot drop).
float readAll(const void* data, std::size_t bytes) {
  const auto* p = static_cast<const float*>(data);
  float acc[16] = {};
  const std::size_t n = bytes / sizeof(float);
  for (std::size_t i = 0; i + 16 <= n; i += 16) {
    for (int j = 0; j < 16; ++j) acc[j] += p[i + static_cast<std::size_t>(j)];
  }
  return std::accumulate(acc, acc + 16, 0.f);
}

volatile float g_sink = 0;

int stages() {
  using namespace dnnl;
  using tag = memory::format_tag;
  using dt = memory::data_type;
  engine eng(engine::kind::cpu, 0);
  stream strm(eng);
  std::vector<float> evict(std::size_t{32} << 20, 1.f);  // 128 MiB: more than the L3
  auto cold = [&] { g_sink = g_sink + readAll(evict.data(), evict.size() * sizeof(float)); };
  auto warm = [] {};
  // resnet18's 3x3 stride-1 convs per stage: channels, and the side at images of 116 and 232.
  struct Stage {
    memory::dim channels, side_small, side_median;
  };
  const Stage list[] = {{64, 29, 58}, {128, 15, 29}, {256, 8, 15}, {512, 4, 8}};
  std::printf(
      "| conv | side | layout | impl | warm ms | cold ms | GFLOP/s cold | weight GB/s cold | "
      "read weight warm ms | read weight cold ms |\n|---|---:|---|---|---:|---:|---:|---:|---:|---:|\n");
  for (const Stage& st : list) {
    for (memory::dim side : {st.side_small, st.side_median}) {
      const memory::dim c = st.channels;
      const memory::dims src_dims = {1, c, side, side}, w_dims = {c, c, 3, 3}, strides = {1, 1}, pads = {1, 1};
      const memory::desc bias_md({c}, dt::f32, tag::x);
      const double flops = 2.0 * static_cast<double>(side * side * c * c * 9);
      struct Variant {
        const char* name;
        tag data;
      };
      for (const Variant& v :
           {Variant{"plain", tag::nchw}, Variant{"any", tag::any}, Variant{"nChw16c", tag::nChw16c}}) {
        const memory::desc src_md(src_dims, dt::f32, v.data), dst_md(src_dims, dt::f32, v.data);
        const memory::desc w_md(w_dims, dt::f32, v.data == tag::nchw ? tag::oihw : tag::any);
        convolution_forward::primitive_desc pd(
            convolution_forward::desc(prop_kind::forward_inference, algorithm::convolution_direct, src_md, w_md,
                                      bias_md, dst_md, strides, pads, pads),
            eng);
        memory src(pd.src_desc(), eng), w(pd.weights_desc(), eng), bias(bias_md, eng), dst(pd.dst_desc(), eng);
        for (memory* m : {&src, &w, &bias}) {
          auto* p = static_cast<float*>(m->get_data_handle());
          const std::size_t n = m->get_desc().get_size() / sizeof(float);
          for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<float>((i * 7919) % 97) / 97.f - 0.5f;
        }
        convolution_forward conv(pd);
        auto run = [&] {
          conv.execute(strm, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_BIAS, bias}, {DNNL_ARG_DST, dst}});
          strm.wait();
        };
        const std::size_t w_bytes = pd.weights_desc().get_size();
        auto read_w = [&] { g_sink = g_sink + readAll(w.get_data_handle(), w_bytes); };
        run();
        const double warm_ms = medianSingleMs(run, warm, 15), cold_ms = medianSingleMs(run, cold, 9);
        const double read_warm = medianSingleMs(read_w, warm, 15), read_cold = medianSingleMs(read_w, cold, 9);
        std::printf("| 3x3 %lld->%lld | %lld | %s | %s | %.3f | %.3f | %.1f | %.1f | %.3f | %.3f |\n",
                    static_cast<long long>(c), static_cast<long long>(c), static_cast<long long>(side), v.name,
                    pd.impl_info_str(), warm_ms, cold_ms, flops / cold_ms / 1e6,
                    static_cast<double>(w_bytes) / cold_ms / 1e6, read_warm, read_cold);
        std::fflush(stdout);
      }
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--stages") == 0) return stages();
  using namespace dnnl;
  using tag = memory::format_tag;
  using dt = memory::data_type;
  const Layer layers[] = {{"stem 7x7/2", 3, 64, 7, 2, 3, 1, 112},   {"3x3 s1", 64, 64, 3, 1, 1, 1, 56},
                          {"3x3 s2", 64, 128, 3, 2, 1, 1, 56},      {"3x3 s1 256", 256, 256, 3, 1, 1, 1, 14},
                          {"3x3 s1 512", 512, 512, 3, 1, 1, 1, 7},  {"1x1 s1", 256, 64, 1, 1, 0, 1, 56},
                          {"1x1 down /2", 64, 128, 1, 2, 0, 1, 56}, {"depthwise 3x3", 128, 128, 3, 1, 1, 128, 28}};
  engine eng(engine::kind::cpu, 0);
  stream strm(eng);
  std::printf("| layer | batch | plain ms | any + reorders ms | any, reordered once ms | plain impl | any impl |\n");
  std::printf("|---|---:|---:|---:|---:|---|---|\n");
  for (const Layer& l : layers) {
    for (memory::dim batch : {1, 8}) {
      const memory::dim out = (l.side + 2 * l.pad - l.kernel) / l.stride + 1;
      const memory::dims src_dims = {batch, l.cin, l.side, l.side}, dst_dims = {batch, l.cout, out, out};
      const memory::dims w_dims = l.groups > 1
                                      ? memory::dims{l.groups, l.cout / l.groups, l.cin / l.groups, l.kernel, l.kernel}
                                      : memory::dims{l.cout, l.cin, l.kernel, l.kernel};
      const tag w_tag = l.groups > 1 ? tag::goihw : tag::oihw;
      const memory::desc src_plain(src_dims, dt::f32, tag::nchw), dst_plain(dst_dims, dt::f32, tag::nchw);
      const memory::desc w_plain(w_dims, dt::f32, w_tag), bias_md({l.cout}, dt::f32, tag::x);
      const memory::dims strides = {l.stride, l.stride}, pads = {l.pad, l.pad};
      auto make = [&](const memory::desc& s, const memory::desc& w, const memory::desc& d) {
        return convolution_forward::primitive_desc(
            convolution_forward::desc(prop_kind::forward_inference, algorithm::convolution_direct, s, w, bias_md, d,
                                      strides, pads, pads),
            eng);
      };
      auto plain_pd = make(src_plain, w_plain, dst_plain);
      auto any_pd = make(memory::desc(src_dims, dt::f32, tag::any), memory::desc(w_dims, dt::f32, tag::any),
                         memory::desc(dst_dims, dt::f32, tag::any));
      memory src(src_plain, eng), w(w_plain, eng), bias(bias_md, eng), dst(dst_plain, eng);
      for (memory* m : {&src, &w, &bias}) {
        auto* p = static_cast<float*>(m->get_data_handle());
        const std::size_t n = m->get_desc().get_size() / sizeof(float);
        for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<float>((i * 7919) % 97) / 97.f - 0.5f;
      }
      convolution_forward plain_conv(plain_pd), any_conv(any_pd);
      memory src_b(any_pd.src_desc(), eng), w_b(any_pd.weights_desc(), eng), dst_b(any_pd.dst_desc(), eng);
      reorder src_in(src, src_b), w_in(w, w_b), dst_out(dst_b, dst);
      auto run_plain = [&] {
        plain_conv.execute(strm,
                           {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_BIAS, bias}, {DNNL_ARG_DST, dst}});
        strm.wait();
      };
      auto run_blocked = [&] {
        any_conv.execute(
            strm, {{DNNL_ARG_SRC, src_b}, {DNNL_ARG_WEIGHTS, w_b}, {DNNL_ARG_BIAS, bias}, {DNNL_ARG_DST, dst_b}});
        strm.wait();
      };
      auto run_reorders = [&] {
        src_in.execute(strm, src, src_b);
        w_in.execute(strm, w, w_b);
        run_blocked();
        dst_out.execute(strm, dst_b, dst);
        strm.wait();
      };
      run_plain();
      run_reorders();
      const int calls = batch == 1 ? 10 : 3, rounds = 7;
      double plain_ms = 0, reorder_ms = 0, blocked_ms = 0;
      std::vector<double> p, r, b;
      for (int round = 0; round < rounds; ++round) {  // interleaved
        p.push_back(medianMs(run_plain, calls, 1));
        r.push_back(medianMs(run_reorders, calls, 1));
        b.push_back(medianMs(run_blocked, calls, 1));
      }
      for (auto* v : {&p, &r, &b}) std::sort(v->begin(), v->end());
      plain_ms = p[p.size() / 2], reorder_ms = r[r.size() / 2], blocked_ms = b[b.size() / 2];
      std::printf("| %s | %lld | %.3f | %.3f | %.3f | %s | %s |\n", l.name, static_cast<long long>(batch), plain_ms,
                  reorder_ms, blocked_ms, plain_pd.impl_info_str(), any_pd.impl_info_str());
    }
  }
  return 0;
}
