// SPDX-License-Identifier: Apache-2.0
// This host's one-core f32 matmul rate through oneDNN at the reference cell's two matmul shapes
// (x·W_ihᵀ: [32·seq, 128] x [128, 1024]; h·W_hhᵀ: [32, 256] x [256, 1024], weights row-major
// [1024, K] as in the cell), in the calling thread's CPU time, through both of oneDNN's f32 entry
// points (the matmul primitive and dnnl_sgemm; either can be the faster on a host): the number the
// "cell ≥ 3× eager" statement in BENCHMARKS.md rests on (issue 19; bench/cell_bound.py reads it).
// Built as build/bench/svm_bench_onednn_peak; run with
//   OMP_NUM_THREADS=1 DNNL_VERBOSE=1 taskset -c 0 build/bench/svm_bench_onednn_peak
// (DNNL_VERBOSE=1 prints the implementation oneDNN chose, e.g. brg:avx512_core.)
#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <cstdio>
#include <unordered_map>
#include <vector>

#include "cpu_timing.h"

namespace {

using shapevm::bench::medianCallSeconds;

}  // namespace

int main() {
  dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  struct Shape {
    const char* what;
    long m, k, n;
  };
  const Shape shapes[] = {{"x*W_ih^T seq 10", 320, 128, 1024}, {"x*W_ih^T seq 20", 640, 128, 1024},
                          {"x*W_ih^T seq 30", 960, 128, 1024}, {"x*W_ih^T seq 120", 3840, 128, 1024},
                          {"h*W_hh^T", 32, 256, 1024},         {"square 1024", 1024, 1024, 1024}};
  std::printf(
      "| shape | M x K x N | primitive µs/call | primitive GFLOP/s | sgemm µs/call | sgemm GFLOP/s | best GFLOP/s |\n"
      "|---|---|---:|---:|---:|---:|---:|\n");
  for (const Shape& s : shapes) {
    using tag = dnnl::memory::format_tag;
    using dt = dnnl::memory::data_type;
    dnnl::memory::desc a_md({s.m, s.k}, dt::f32, tag::ab);
    dnnl::memory::desc b_md({s.k, s.n}, dt::f32, tag::ba);  // W [N, K] row-major, used transposed
    dnnl::memory::desc c_md({s.m, s.n}, dt::f32, tag::ab);
    std::vector<float> a(static_cast<std::size_t>(s.m * s.k)), b(static_cast<std::size_t>(s.k * s.n)),
        c(static_cast<std::size_t>(s.m * s.n));
    for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i % 17) * 0.0625f - 0.5f;
    for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(i % 13) * 0.0625f - 0.375f;
    dnnl::memory am(a_md, engine, a.data()), bm(b_md, engine, b.data()), cm(c_md, engine, c.data());
    dnnl::matmul mm(dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_md, b_md, c_md), engine));
    const std::unordered_map<int, dnnl::memory> args = {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}};
    const double flop = 2.0 * static_cast<double>(s.m) * static_cast<double>(s.k) * static_cast<double>(s.n);
    const int calls = std::max(3, static_cast<int>(2e9 / flop));  // about 2 GFLOP (tens of ms) per round
    const auto primitive = [&] {
      mm.execute(stream, args);
      stream.wait();
    };
    // Row-major C = A · Wᵀ with W [N, K], as the cell multiplies.
    const auto sgemm = [&] {
      dnnl_sgemm('N', 'T', s.m, s.n, s.k, 1.0f, a.data(), s.k, b.data(), s.k, 0.0f, c.data(), s.n);
    };
    medianCallSeconds(primitive, calls, 1);  // warm-up
    medianCallSeconds(sgemm, calls, 1);
    std::vector<double> p_rounds, s_rounds;
    for (int r = 0; r < 9; ++r) {  // interleaved rounds, medians
      p_rounds.push_back(medianCallSeconds(primitive, calls, 1));
      s_rounds.push_back(medianCallSeconds(sgemm, calls, 1));
    }
    std::sort(p_rounds.begin(), p_rounds.end());
    std::sort(s_rounds.begin(), s_rounds.end());
    const double primitive_s = p_rounds[p_rounds.size() / 2];
    const double sgemm_s = s_rounds[s_rounds.size() / 2];
    std::printf("| %s | %ld x %ld x %ld | %.1f | %.1f | %.1f | %.1f | %.1f |\n", s.what, s.m, s.k, s.n,
                primitive_s * 1e6, flop / primitive_s * 1e-9, sgemm_s * 1e6, flop / sgemm_s * 1e-9,
                flop / std::min(primitive_s, sgemm_s) * 1e-9);
  }
  return 0;
}
