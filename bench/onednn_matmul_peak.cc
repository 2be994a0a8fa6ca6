// SPDX-License-Identifier: Apache-2.0
// This host's one-core f32 matmul rate through oneDNN at the reference cell's two matmul shapes
// (x·W_ihᵀ: [32·seq, 128] x [128, 1024]; h·W_hhᵀ: [32, 256] x [256, 1024], weights row-major
// [1024, K] as in the cell), in the calling thread's CPU time: the number the "cell ≥ 3× eager"
// statement in BENCHMARKS.md rests on (issue 19). Built as build/bench/svm_bench_onednn_peak; run with
//   OMP_NUM_THREADS=1 DNNL_VERBOSE=1 taskset -c 0 build/bench/svm_bench_onednn_peak
// (DNNL_VERBOSE=1 prints the implementation oneDNN chose, e.g. brg:avx512_core.)
#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <vector>

namespace {

double threadSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Median over `rounds` of the per-call time of `calls` back-to-back executions.
double medianCallSeconds(dnnl::matmul& mm, dnnl::stream& stream, const std::unordered_map<int, dnnl::memory>& args,
                         int calls, int rounds) {
  std::vector<double> times;
  for (int r = 0; r < rounds; ++r) {
    const double start = threadSeconds();
    for (int c = 0; c < calls; ++c) mm.execute(stream, args);
    stream.wait();
    times.push_back((threadSeconds() - start) / calls);
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace

int main() {
  dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  struct Shape {
    const char* what;
    long m, k, n;
  };
  const Shape shapes[] = {{"x*W_ih^T seq 10", 320, 128, 1024},
                          {"x*W_ih^T seq 30", 960, 128, 1024},
                          {"x*W_ih^T seq 120", 3840, 128, 1024},
                          {"h*W_hh^T", 32, 256, 1024},
                          {"square 1024", 1024, 1024, 1024}};
  std::printf("| shape | M x K x N | µs/call (thread CPU) | GFLOP/s |\n|---|---|---:|---:|\n");
  for (const Shape& s : shapes) {
    using tag = dnnl::memory::format_tag;
    using dt = dnnl::memory::data_type;
    dnnl::memory::desc a_md({s.m, s.k}, dt::f32, tag::ab);
    dnnl::memory::desc b_md({s.k, s.n}, dt::f32, tag::ba);  // W [N, K] row-major, used transposed
    dnnl::memory::desc c_md({s.m, s.n}, dt::f32, tag::ab);
    std::vector<float> a(static_cast<std::size_t>(s.m * s.k), 0.5f), b(static_cast<std::size_t>(s.k * s.n), 0.25f),
        c(static_cast<std::size_t>(s.m * s.n));
    dnnl::memory am(a_md, engine, a.data()), bm(b_md, engine, b.data()), cm(c_md, engine, c.data());
    dnnl::matmul mm(dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_md, b_md, c_md), engine));
    const std::unordered_map<int, dnnl::memory> args = {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}};
    const double flop = 2.0 * static_cast<double>(s.m) * static_cast<double>(s.k) * static_cast<double>(s.n);
    const int calls = std::max(3, static_cast<int>(2e9 / flop));  // about 2 GFLOP (tens of ms) per round
    medianCallSeconds(mm, stream, args, calls, 1);                // warm-up
    const double seconds = medianCallSeconds(mm, stream, args, calls, 9);
    std::printf("| %s | %ld x %ld x %ld | %.1f | %.1f |\n", s.what, s.m, s.k, s.n, seconds * 1e6,
                flop / seconds * 1e-9);
  }
  return 0;
}
