// SPDX-License-Identifier: Apache-2.0
// The process-wide cache of a library family's primitives (library_onednn.cc's matmuls,
// library_onednn_conv.cc's convs): one primitive per problem key (its text), created once, never
// destroyed (kernels may run during static destruction), at most `max` of them. A key oneDNN
// could not create is remembered with its reason, so a kernel that meets it again fails at once.
// The family's call counters stay its own (atomics beside the cache). Also OmpThreads, which both
// families hold around a primitive's execution, and what both do once oneDNN has a primitive
// descriptor (createPrimitive).
#pragma once

#include <dlfcn.h>
#include <time.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <oneapi/dnnl/dnnl.h>

#include "shapevm/status.h"

namespace shapevm::jit::library {

// The calling thread's CPU time in milliseconds.
inline double threadCpuNowMs() {
  timespec now{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) * 1e3 + static_cast<double>(now.tv_nsec) * 1e-6;
}

// Milliseconds (the thread's CPU time, so that an install's CPU split stays right on a loaded
// host) the calling thread has spent creating primitives, over every cache.
inline double& threadCreateMs() {
  thread_local double ms = 0;
  return ms;
}

template <typename Problem, typename Primitive>
class PrimitiveCache {
 public:
  struct Totals {
    std::size_t primitives = 0;
    double create_ms = 0;
  };

  // `what` names the family in errors ("oneDNN matmul").
  PrimitiveCache(std::string_view what, std::size_t max) : what_(what), max_(max) {}

  // The primitive for `problem` (Primitive::create(problem) on a miss); the reason when oneDNN
  // cannot create it, or the cache is full. `on_failure(reason)` runs once per key oneDNN could
  // not create (under the cache's lock).
  template <typename OnFailure>
  Expected<Primitive*> findOrCreate(const Problem& problem, OnFailure&& on_failure) {
    const std::string key = problem.toString();
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto found = primitives_.find(key); found != primitives_.end()) return found->second.get();
    if (auto failed = failures_.find(key); failed != failures_.end()) {
      return makeError(ErrorCode::Unsupported, "{}", failed->second);
    }
    if (primitives_.size() >= max_) {
      return makeError(ErrorCode::Unsupported, "{}: {} primitives cached already", what_, max_);
    }
    const double start = threadCpuNowMs();
    Expected<std::unique_ptr<Primitive>> created = Primitive::create(problem);
    const double ms = threadCpuNowMs() - start;
    create_ms_ += ms;
    threadCreateMs() += ms;
    if (!created) {
      std::string reason = fmt::format("{} {}: {}", what_, key, created.status().message());
      on_failure(reason);
      failures_.emplace(key, reason);
      return makeError(ErrorCode::Unsupported, "{}", reason);
    }
    Primitive* primitive = created->get();
    primitives_.emplace(key, std::move(*created));
    return primitive;
  }
  Expected<Primitive*> findOrCreate(const Problem& problem) {
    return findOrCreate(problem, [](const std::string&) {});
  }

  Totals totals() {
    std::lock_guard<std::mutex> lock(mutex_);
    return {primitives_.size(), create_ms_};
  }

 private:
  std::string what_;
  std::size_t max_;
  std::mutex mutex_;
  std::map<std::string, std::unique_ptr<Primitive>> primitives_;
  std::map<std::string, std::string> failures_;  // keys oneDNN could not create, with the reason
  double create_ms_ = 0;
};

// oneDNN's OpenMP threads for the calling thread (its nthreads ICV) held to the kernel's task
// count for the scope, then restored (other OpenMP users on this thread, e.g. torch in the Python
// module, keep theirs). libgomp is oneDNN's own dependency: looked up, not linked.
class OmpThreads {
 public:
  explicit OmpThreads(int threads) {
    static const auto set = reinterpret_cast<void (*)(int)>(dlsym(RTLD_DEFAULT, "omp_set_num_threads"));
    static const auto get = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "omp_get_max_threads"));
    if (set == nullptr || get == nullptr) return;
    saved_ = get();
    if (saved_ == threads) return;
    set_ = set;
    set_(threads);
  }
  ~OmpThreads() {
    if (set_ != nullptr) set_(saved_);
  }
  OmpThreads(const OmpThreads&) = delete;
  OmpThreads& operator=(const OmpThreads&) = delete;

 private:
  void (*set_)(int) = nullptr;
  int saved_ = 1;
};

// A oneDNN call's status as ours.
inline Status check(dnnl_status_t status, const char* what) {
  if (status == dnnl_success) return Status::ok();
  return makeError(ErrorCode::Unsupported, "oneDNN {} failed (status {})", what, static_cast<int>(status));
}

// Once oneDNN has the primitive descriptor `pd`: the primitive, one memory object per operand
// descriptor (no data yet: a call sets its handle; `args[i]` binds memories[i]), and, when the
// primitive needs one, the memory of its user-mode scratchpad, bound as DNNL_ARG_SCRATCHPAD (the
// calling thread's buffer is its handle per call: oneDNN's process-wide scratchpad would be shared
// by distinct primitives running at once). The scratchpad's size in bytes (0: none).
inline Expected<std::int64_t> createPrimitive(dnnl_engine_t engine, const_dnnl_primitive_desc_t pd,
                                              std::span<const dnnl_memory_desc_t> descs, dnnl_primitive_t& primitive,
                                              std::vector<dnnl_memory_t>& memories, std::vector<dnnl_exec_arg_t>& args,
                                              dnnl_memory_t& scratchpad) {
  SVM_RETURN_IF_ERROR(check(dnnl_primitive_create(&primitive, pd), "primitive_create"));
  for (std::size_t i = 0; i < descs.size(); ++i) {
    dnnl_memory_t memory = nullptr;
    SVM_RETURN_IF_ERROR(check(dnnl_memory_create(&memory, &descs[i], engine, DNNL_MEMORY_NONE), "memory_create"));
    memories.push_back(memory);
    args[i].memory = memory;
  }
  const dnnl_memory_desc_t* scratch = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
  if (scratch == nullptr || dnnl_memory_desc_get_size(scratch) == 0) return std::int64_t{0};
  SVM_RETURN_IF_ERROR(check(dnnl_memory_create(&scratchpad, scratch, engine, DNNL_MEMORY_NONE), "memory_create"));
  args.push_back({DNNL_ARG_SCRATCHPAD, scratchpad});
  return static_cast<std::int64_t>(dnnl_memory_desc_get_size(scratch));
}

}  // namespace shapevm::jit::library
