// SPDX-License-Identifier: Apache-2.0
// A small persistent worker pool for compiled kernels that split their output across threads.
// Workers are started on demand (up to the largest task count asked for); between jobs a worker
// spins for kSpin before it sleeps, and so does a caller waiting for the workers to finish, so
// kernels run back to back (a matmul per loop step) do not pay a futex wake-up each (tens of
// microseconds on a VM: at 256^3 two threads were no faster than one without the spin). run()
// hands out task indices from an atomic counter, the calling thread takes tasks too, and it
// returns only when every task has finished.
// Invariant: run() never deadlocks — a call from inside a pool task, or while another thread's
// job holds the pool, runs its tasks inline on the calling thread (same results, one core).
// Background threads (JIT compiles, tuning) lower themselves with lowerThreadPriority(); the
// pool's workers always run at the priority of the process, whichever thread first asked for them.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace shapevm {

// Lowers the calling thread below the threads that run the program: SCHED_BATCH (it never
// preempts them on wake-up; the scheduler treats it as CPU-bound) and its nice value raised by
// `nice_increment` (0..19; Linux keeps nice per thread). Not SCHED_IDLE: that weight (3 against
// 1024) all but stops the thread while the program keeps every core busy, so a busy loop would
// never tier up; nice +10 leaves it about a tenth of a contended core. A thread cannot raise its
// priority again. False (nothing changed, or only part) where the OS refuses.
bool lowerThreadPriority(int nice_increment);
// True once the calling thread lowered itself.
bool threadPriorityLowered();
// A thread running `body` at the process's normal priority, also when the caller is lowered
// (Linux threads inherit policy and nice: a lowered caller has a normal-priority helper thread,
// made before it lowered itself, start it).
std::thread startNormalPriorityThread(std::function<void()> body);

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
  static constexpr std::chrono::microseconds kSpin{200};

 private:
  struct Job;
  void ensureWorkers(int count);  // call with run_mutex_ held
  void workerLoop(std::uint64_t seen);  // seen: the generation before the first job it may join

  std::mutex run_mutex_;  // one job at a time; try_lock fails -> inline
  mutable std::mutex mutex_;
  std::condition_variable wake_;   // workers: a new job
  std::condition_variable done_;   // caller: tasks finished and workers left the job
  Job* job_ = nullptr;             // guarded by mutex_
  // Written under mutex_; read without it by spinning workers and callers.
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<int> active_{0};  // workers inside the current job
  std::vector<std::thread> threads_;
};

}  // namespace shapevm
