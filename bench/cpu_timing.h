// SPDX-License-Identifier: Apache-2.0
// Thread-CPU timing for the standalone oneDNN peer benches (onednn_matmul_peak.cc,
// onednn_conv_layout.cc): on a shared, loaded host the calling thread's CPU time is what one
// call costs, where wall time also counts waiting for a core.
#pragma once

#include <algorithm>
#include <ctime>
#include <vector>

namespace shapevm::bench {

inline double threadSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Median over `rounds` of the per-call time of `calls` back-to-back runs of `call`, in seconds.
template <typename Call>
double medianCallSeconds(const Call& call, int calls, int rounds) {
  std::vector<double> times;
  for (int r = 0; r < rounds; ++r) {
    const double start = threadSeconds();
    for (int c = 0; c < calls; ++c) call();
    times.push_back((threadSeconds() - start) / calls);
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace shapevm::bench
