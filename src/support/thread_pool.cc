// SPDX-License-Identifier: Apache-2.0
// ThreadPool: generation-counted jobs under one mutex; tasks are claimed with an atomic counter
// so the caller and the workers share them without further locking. A job lives on the caller's
// stack, so the caller waits until every worker that joined it has left before returning.
#include "support/thread_pool.h"

#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <deque>
#include <future>

namespace shapevm {
namespace {
thread_local bool t_in_pool_task = false;
thread_local bool t_lowered = false;

// Starts threads for lowered callers: one thread, made at normal priority by the first
// lowerThreadPriority() call (before that caller lowered itself), never destroyed.
class NormalPriorityStarter {
 public:
  static NormalPriorityStarter& get() {
    static NormalPriorityStarter* starter = new NormalPriorityStarter();  // leaked: may be asked at exit
    return *starter;
  }
  std::thread start(std::function<void()> body) {
    std::packaged_task<std::thread()> task([body = std::move(body)]() mutable { return std::thread(std::move(body)); });
    std::future<std::thread> started = task.get_future();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      requests_.push_back(std::move(task));
    }
    wake_.notify_one();
    return started.get();
  }

 private:
  NormalPriorityStarter() {
    std::thread([this] {
      std::unique_lock<std::mutex> lock(mutex_);
      for (;;) {
        wake_.wait(lock, [&] { return !requests_.empty(); });
        std::packaged_task<std::thread()> task = std::move(requests_.front());
        requests_.pop_front();
        lock.unlock();
        task();
        lock.lock();
      }
    }).detach();
  }
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::packaged_task<std::thread()>> requests_;
};

// One poll's pause: the CPU's spin-wait hint. sched_yield() is a system call, and on this
// project's VM (a paravirtualized guest) a worker polling through it spent a third of its time in
// the kernel while two threads ran the loop workload, and answered a new job later.
inline void pausePoll() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

// Polls `ready` until it holds or kSpin has passed; true if it holds. For the first kPauseSpin
// the polls are separated by the pause hint (the thread keeps its core: the next job of
// back-to-back kernels is microseconds away); after that by a yield, so that another runnable
// thread may take the core.
template <typename Ready>
bool spinUntil(const Ready& ready) {
  constexpr auto kPauseSpin = std::chrono::microseconds(50);
  const auto start = std::chrono::steady_clock::now();
  bool yielding = false;
  for (int polls = 0;; ++polls) {
    if (ready()) return true;
    if ((polls & 63) == 63) {
      const auto waited = std::chrono::steady_clock::now() - start;
      if (waited >= ThreadPool::kSpin) return false;
      yielding = waited >= kPauseSpin;
    }
    if (yielding) {
      std::this_thread::yield();
    } else {
      pausePoll();
    }
  }
}
}  // namespace

bool lowerThreadPriority(int nice_increment) {
  NormalPriorityStarter::get();  // made now, while this thread still has the normal priority
  const auto tid = static_cast<id_t>(syscall(SYS_gettid));
  sched_param param{};
  param.sched_priority = 0;
  bool ok = sched_setscheduler(0, SCHED_BATCH, &param) == 0;
  errno = 0;
  const int nice = getpriority(PRIO_PROCESS, tid);
  if (errno != 0) return false;
  const int increment = std::clamp(nice_increment, 0, 19);
  ok = (increment == 0 || setpriority(PRIO_PROCESS, tid, std::min(19, nice + increment)) == 0) && ok;
  t_lowered = true;
  return ok;
}

bool threadPriorityLowered() {
  return t_lowered;
}

std::thread startNormalPriorityThread(std::function<void()> body) {
  if (!t_lowered) return std::thread(std::move(body));
  return NormalPriorityStarter::get().start(std::move(body));
}

struct ThreadPool::Job {
  const std::function<void(int)>* fn;
  int n_tasks;
  std::atomic<int> next{0};
  std::atomic<int> finished{0};
};

ThreadPool& ThreadPool::global() {
  static ThreadPool* pool = new ThreadPool();  // leaked on purpose: workers outlive static destruction
  return *pool;
}

int ThreadPool::workers() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int>(threads_.size());
}

void ThreadPool::ensureWorkers(int count) {
  count = std::min(count, kMaxWorkers);
  std::lock_guard<std::mutex> lock(mutex_);
  while (static_cast<int>(threads_.size()) < count) {
    // The worker starts from the generation before the job about to be published (run() calls
    // this before it bumps the generation), so it joins that job however late it starts.
    threads_.push_back(startNormalPriorityThread([this, seen = generation_.load()] { workerLoop(seen); }));
    threads_.back().detach();
  }
}

void ThreadPool::workerLoop(std::uint64_t seen) {
  t_in_pool_task = true;
  for (;;) {
    Job* job = nullptr;
    spinUntil([&] { return generation_.load(std::memory_order_acquire) != seen; });
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return generation_ != seen; });
      seen = generation_;
      job = job_;
      if (job == nullptr) continue;
      ++active_;
    }
    for (int i = job->next.fetch_add(1); i < job->n_tasks; i = job->next.fetch_add(1)) {
      (*job->fn)(i);
      job->finished.fetch_add(1, std::memory_order_acq_rel);
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      --active_;
    }
    done_.notify_all();
  }
}

void ThreadPool::run(int n_tasks, const std::function<void(int)>& fn) {
  std::unique_lock<std::mutex> run_lock(run_mutex_, std::defer_lock);
  if (n_tasks <= 1 || t_in_pool_task || !run_lock.try_lock()) {
    for (int i = 0; i < n_tasks; ++i) fn(i);
    return;
  }
  ensureWorkers(n_tasks - 1);
  Job job{&fn, n_tasks};
  {
    std::lock_guard<std::mutex> lock(mutex_);
    job_ = &job;
    ++generation_;
  }
  wake_.notify_all();
  t_in_pool_task = true;  // a nested run() from fn on this thread runs inline
  for (int i = job.next.fetch_add(1); i < n_tasks; i = job.next.fetch_add(1)) {
    fn(i);
    job.finished.fetch_add(1, std::memory_order_acq_rel);
  }
  t_in_pool_task = false;
  spinUntil([&] { return job.finished.load(std::memory_order_acquire) == n_tasks && active_.load() == 0; });
  std::unique_lock<std::mutex> lock(mutex_);
  done_.wait(lock, [&] { return job.finished.load(std::memory_order_acquire) == n_tasks && active_ == 0; });
  job_ = nullptr;
}

}  // namespace shapevm
