// SPDX-License-Identifier: Apache-2.0
// oneDNN's f32 convolution primitive on one core at bench/conv_layers.py's ResNet-style layers,
// three ways, in the calling thread's CPU time: on plain NCHW tensors as ShapeVM stores them (what
// the conv family's library candidate runs, library_onednn_conv.h); on the layouts oneDNN picks
// (format any) with the input and the weight reordered into them and the output back on every
// call (a weight may change between calls, so its reordered copy cannot be kept); and on those
// layouts with everything reordered once (the primitive alone: the ceiling). It prints the
// implementation oneDNN chose for each. Issue 21: which layout the library candidate uses.
// Built as build/bench/svm_bench_onednn_conv_layout; run with
//   OMP_NUM_THREADS=1 build/bench/svm_bench_onednn_conv_layout
#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <cstdio>
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

}  // namespace

int main() {
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
