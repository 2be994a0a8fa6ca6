// SPDX-License-Identifier: Apache-2.0
// The worker pool compiled kernels split their work across (support/thread_pool.h): every task
// of every job runs exactly once, nested calls and callers racing for the pool run inline instead
// of deadlocking. scripts/test.sh --tsan also runs these under ThreadSanitizer.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "support/thread_pool.h"

namespace shapevm {
namespace {

TEST(ThreadPool, RunsEveryTaskOnceAndNests) {
  std::vector<std::atomic<int>> hits(100);
  ThreadPool::global().run(100, [&](int i) {
    hits[static_cast<std::size_t>(i)].fetch_add(1);
    ThreadPool::global().run(3, [&](int) {});  // nested: inline, no deadlock
  });
  for (const auto& h : hits) EXPECT_EQ(h.load(), 1);
}

// Jobs back to back (the workers still spinning from the last one) from two callers at once (one
// of them runs inline while the other holds the pool): every task of every job runs exactly once.
TEST(ThreadPool, BackToBackJobsFromTwoCallersRunEveryTaskOnce) {
  constexpr int kJobs = 300;
  auto caller = [](int tasks, std::atomic<int>& wrong) {
    for (int job = 0; job < kJobs; ++job) {
      std::vector<std::atomic<int>> hits(static_cast<std::size_t>(tasks));
      ThreadPool::global().run(tasks, [&](int i) { hits[static_cast<std::size_t>(i)].fetch_add(1); });
      for (const auto& h : hits) wrong += h.load() != 1;
    }
  };
  std::atomic<int> wrong{0};
  std::thread other([&] { caller(3, wrong); });
  caller(2, wrong);
  other.join();
  EXPECT_EQ(wrong.load(), 0);
}

}  // namespace
}  // namespace shapevm
