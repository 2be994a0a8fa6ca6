// SPDX-License-Identifier: Apache-2.0
// A small persistent worker pool for compiled kernels that split their output across threads.
// Workers are started on demand (up to the largest task count asked for) and then sleep between
// jobs; run() hands out task indices from an atomic counter, the calling thread takes tasks too,
// and it returns only when every task has finished.
// Invariant: run() never deadlocks — a call from inside a pool task, or while another thread's
// job holds the pool, runs its tasks inline on the calling thread (same results, one core).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace shapevm {

class ThreadPool {
 public:
  // The process-wide pool (never destroyed: workers may still sleep in it at exit).
  static ThreadPool& global();

  // Runs fn(0) .. fn(n_tasks - 1), spread over up to n_tasks threads (this one included); blocks
  // until all are done. fn must not throw.
  void run(int n_tasks, const std::function<void(int)>& fn);

  // Worker threads started so far (not counting callers).
  int workers() const;

  static constexpr int kMaxWorkers = 63;

 private:
  struct Job;
  void ensureWorkers(int count);  // call with run_mutex_ held
  void workerLoop();

  std::mutex run_mutex_;  // one job at a time; try_lock fails -> inline
  mutable std::mutex mutex_;
  std::condition_variable wake_;   // workers: a new job
  std::condition_variable done_;   // caller: tasks finished and workers left the job
  Job* job_ = nullptr;             // guarded by mutex_
  std::uint64_t generation_ = 0;   // guarded by mutex_
  int active_ = 0;                 // workers inside the current job; guarded by mutex_
  std::vector<std::thread> threads_;
};

}  // namespace shapevm
