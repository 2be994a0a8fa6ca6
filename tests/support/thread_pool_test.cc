// SPDX-License-Identifier: Apache-2.0
// The worker pool compiled kernels split their work across (support/thread_pool.h): every task
// of every job runs exactly once, nested calls and callers racing for the pool run inline instead
// of deadlocking; a lowered (background) thread runs SCHED_BATCH at a higher nice value, and pool
// workers it starts still run at the process's priority. scripts/test.sh --tsan also runs these
// under ThreadSanitizer.
#include <gtest/gtest.h>

#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
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

// The calling thread's scheduling policy and nice value (Linux: both per thread).
struct Priority {
  int policy = -1;
  int nice = 0;
};
Priority threadPriority() {
  Priority p;
  p.policy = sched_getscheduler(0);
  p.nice = getpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)));
  return p;
}

TEST(ThreadPriority, LoweredThreadRunsBatchAtHigherNice) {
  const Priority caller = threadPriority();
  Priority before, after;
  bool ok = false, lowered = false;
  std::thread([&] {
    before = threadPriority();
    ok = lowerThreadPriority(5);
    after = threadPriority();
    lowered = threadPriorityLowered();
  }).join();
  EXPECT_EQ(before.policy, caller.policy);
  EXPECT_EQ(before.nice, caller.nice);
  ASSERT_TRUE(ok);
  EXPECT_TRUE(lowered);
  EXPECT_FALSE(threadPriorityLowered());  // only that thread
  EXPECT_EQ(after.policy, SCHED_BATCH);
  EXPECT_EQ(after.nice, std::min(19, caller.nice + 5));
  EXPECT_EQ(threadPriority().nice, caller.nice);  // the caller is left alone
}

// A region compile's helper threads are plain threads started by the lowered compile thread: they
// must inherit its SCHED_BATCH policy and nice value (Linux keeps both per thread and copies them
// to a new thread), or they would compete with the interpreter at its own priority.
TEST(ThreadPriority, ThreadsStartedByALoweredThreadAreLoweredToo) {
  const Priority normal = threadPriority();
  Priority lowered, helper;
  bool helper_flag = true;
  std::thread([&] {
    ASSERT_TRUE(lowerThreadPriority(4));
    lowered = threadPriority();
    std::thread([&] {
      helper = threadPriority();
      helper_flag = threadPriorityLowered();
    }).join();
  }).join();
  EXPECT_EQ(lowered.policy, SCHED_BATCH);
  EXPECT_EQ(lowered.nice, std::min(19, normal.nice + 4));
  EXPECT_EQ(helper.policy, SCHED_BATCH);
  EXPECT_EQ(helper.nice, lowered.nice);
  EXPECT_FALSE(helper_flag) << "the flag is per thread: only lowerThreadPriority() sets it";
}

// Pool workers first asked for by a lowered thread (a compile thread validating a split kernel)
// run at the caller's, not the lowered thread's, priority: the program's kernels use them.
TEST(ThreadPriority, PoolWorkersStartedFromALoweredThreadRunAtNormalPriority) {
  const Priority normal = threadPriority();
  auto* pool = new ThreadPool();  // leaked like global(): its detached workers use it until exit
  Priority worker, lowered;
  std::thread([&] {
    ASSERT_TRUE(lowerThreadPriority(7));
    lowered = threadPriority();
    const std::thread::id self = std::this_thread::get_id();
    std::atomic<int> arrived{0};
    std::atomic<bool> recorded{false};
    pool->run(2, [&](int) {
      arrived.fetch_add(1);
      // Both tasks in at once: one of them is on a worker (bounded wait: a busy machine).
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (arrived.load() < 2 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
      if (std::this_thread::get_id() != self && !recorded.exchange(true)) worker = threadPriority();
    });
    ASSERT_TRUE(recorded.load());
  }).join();
  EXPECT_EQ(lowered.policy, SCHED_BATCH);
  EXPECT_EQ(lowered.nice, std::min(19, normal.nice + 7));
  EXPECT_EQ(worker.policy, normal.policy);
  EXPECT_EQ(worker.nice, normal.nice);
}

}  // namespace
}  // namespace shapevm
