// SPDX-License-Identifier: Apache-2.0
// CachingAllocator: size-classed free lists over aligned_alloc. Counts every request and every
// system allocation so "allocations per run" is measurable. Thread-safe (one spin lock: the
// critical sections are a few loads and stores, and an uncontended pthread mutex costs more
// than the rest of an op's allocation; the
// interpreter and the compile thread both allocate). A lowered thread (JIT compile and tuning:
// support/thread_pool.h) neither takes nor keeps cached blocks: the program's next call never pays
// a system allocation for a block a compile holds, and a compile's odd sizes never fill the cache.
// A block of kHugeBlockBytes or more is aligned to that size and its whole huge pages are offered
// to transparent huge pages (madvise): first touching a large tensor then takes one page fault
// per 2 MiB instead of 512 (on a virtual machine each fault costs microseconds; the reference
// cell's first runs spent about 100 ms in them).
#include <sys/mman.h>

#include <cstdlib>
#include <map>
#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

#include "shapevm/tensor.h"
#include "support/thread_pool.h"
#include "support/tunables.h"

namespace shapevm {

// Power-of-two classes up to 64 KiB live in an array indexed by log2 (no lookup per request);
// larger classes in a map.
constexpr int kSmallClasses = 11;  // 64 B .. 64 KiB
constexpr std::size_t kHugeBlockBytes = std::size_t{2} << 20;
constexpr std::size_t kPopulateBytes = std::size_t{128} << 10;

// aligned_alloc, a large block aligned to and advised for huge pages (where the kernel offers
// them; elsewhere the advice is ignored).
void* systemAllocate(std::size_t size) {
  const bool huge = size >= kHugeBlockBytes;
  void* ptr = std::aligned_alloc(huge ? kHugeBlockBytes : 64, size);
  if (ptr == nullptr || size < kPopulateBytes) return ptr;
#ifdef MADV_HUGEPAGE
  if (huge) (void)madvise(ptr, size / kHugeBlockBytes * kHugeBlockBytes, MADV_HUGEPAGE);
#endif
#ifdef MADV_POPULATE_WRITE
  const auto begin = (reinterpret_cast<std::uintptr_t>(ptr) + 4095) & ~std::uintptr_t{4095};
  const auto end = (reinterpret_cast<std::uintptr_t>(ptr) + size) & ~std::uintptr_t{4095};
  if (end > begin) (void)madvise(reinterpret_cast<void*>(begin), end - begin, MADV_POPULATE_WRITE);
#endif
  return ptr;
}
int smallClassIndex(std::size_t size) {
  return size <= 65536 && (size & (size - 1)) == 0 ? __builtin_ctzll(size) - 6 : -1;
}

// Test-and-test-and-set lock for the allocator's short critical sections; yields when contended.
class SpinLock {
 public:
  void lock() {
    for (int spins = 0; flag_.exchange(true, std::memory_order_acquire); ++spins) {
      while (flag_.load(std::memory_order_relaxed)) {
        if (++spins > 64) std::this_thread::yield();
      }
    }
  }
  void unlock() { flag_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> flag_{false};
};

struct CachingAllocator::Impl {
  SpinLock mutex;
  std::vector<void*> small_lists[kSmallClasses];
  std::map<std::size_t, std::vector<void*>> large_lists;
  AllocatorStats stats;
  std::vector<void*>& listFor(std::size_t size) {
    int index = smallClassIndex(size);
    return index >= 0 ? small_lists[index] : large_lists[size];
  }
};

CachingAllocator& CachingAllocator::global() {
  static CachingAllocator* allocator = new CachingAllocator();  // never destroyed: storages may outlive statics
  return *allocator;
}

CachingAllocator::Impl& CachingAllocator::impl() const {
  static Impl* state = new Impl();
  return *state;
}

std::size_t CachingAllocator::sizeClass(std::size_t nbytes) {
  if (nbytes <= 64) return 64;
  // Power-of-two classes up to 64 KiB, then quarter steps between powers of two.
  std::size_t power = 64;
  while (power < nbytes) power <<= 1;
  if (power <= 65536) return power;
  std::size_t quarter = power / 8;  // steps of power/8 between power/2 and power
  return (nbytes + quarter - 1) / quarter * quarter;
}

Expected<void*> CachingAllocator::allocate(std::size_t nbytes, std::size_t* capacity) {
  auto max_bytes = static_cast<std::size_t>(Tunables::get(Tunable::MaxTensorBytes));
  if (nbytes > max_bytes) {
    return makeError(ErrorCode::OutOfMemory, "allocation of {} bytes exceeds the limit of {} bytes (tunable max_tensor_bytes)",
                     nbytes, max_bytes);
  }
  std::size_t size = sizeClass(nbytes);
  Impl& state = impl();
  const bool cached = !threadPriorityLowered();
  {
    std::lock_guard<SpinLock> lock(state.mutex);
    ++state.stats.requests;
    std::vector<void*>& list = state.listFor(size);
    if (cached && !list.empty()) {
      void* ptr = list.back();
      list.pop_back();
      state.stats.cached_bytes -= static_cast<std::int64_t>(size);
      state.stats.live_bytes += static_cast<std::int64_t>(size);
      if (state.stats.live_bytes > state.stats.peak_bytes) state.stats.peak_bytes = state.stats.live_bytes;
      *capacity = size;
      return ptr;
    }
  }
  if (const std::int64_t every = Tunables::get(Tunable::FaultAllocEvery); every > 0) {
    static std::atomic<std::int64_t> attempts{0};
    if ((attempts.fetch_add(1, std::memory_order_relaxed) + 1) % every == 0) {
      return makeError(ErrorCode::OutOfMemory,
                       "system allocation of {} bytes failed (injected: tunable fault_alloc_every={})", size, every);
    }
  }
  void* ptr = systemAllocate(size);
  if (ptr == nullptr) {
    trim();
    ptr = systemAllocate(size);
    if (ptr == nullptr) return makeError(ErrorCode::OutOfMemory, "system allocation of {} bytes failed", size);
  }
  std::lock_guard<SpinLock> lock(state.mutex);
  ++state.stats.system_allocations;
  state.stats.live_bytes += static_cast<std::int64_t>(size);
  if (state.stats.live_bytes > state.stats.peak_bytes) state.stats.peak_bytes = state.stats.live_bytes;
  *capacity = size;
  return ptr;
}

void CachingAllocator::free(void* ptr, std::size_t capacity) {
  if (ptr == nullptr) return;
  Impl& state = impl();
  bool keep = false;
  const bool cached = !threadPriorityLowered();
  {
    std::lock_guard<SpinLock> lock(state.mutex);
    state.stats.live_bytes -= static_cast<std::int64_t>(capacity);
    auto limit = Tunables::get(Tunable::AllocatorCacheBytes);
    if (cached && state.stats.cached_bytes + static_cast<std::int64_t>(capacity) <= limit) {
      state.listFor(capacity).push_back(ptr);
      state.stats.cached_bytes += static_cast<std::int64_t>(capacity);
      keep = true;
    }
  }
  if (!keep) std::free(ptr);
}

AllocatorStats CachingAllocator::stats() const {
  std::lock_guard<SpinLock> lock(impl().mutex);
  return impl().stats;
}

void CachingAllocator::resetPeak() {
  std::lock_guard<SpinLock> lock(impl().mutex);
  impl().stats.peak_bytes = impl().stats.live_bytes;
}

void CachingAllocator::trim() {
  std::lock_guard<SpinLock> lock(impl().mutex);
  auto release = [](std::vector<void*>& blocks) {
    for (void* block : blocks) std::free(block);
    blocks.clear();
  };
  for (auto& blocks : impl().small_lists) release(blocks);
  for (auto& [size, blocks] : impl().large_lists) release(blocks);
  impl().stats.cached_bytes = 0;
}

}  // namespace shapevm
