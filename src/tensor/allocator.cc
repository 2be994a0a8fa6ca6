// SPDX-License-Identifier: Apache-2.0
// CachingAllocator: size-classed free lists over posix_memalign. Counts every request and every
// system allocation so "allocations per run" is measurable. Thread-safe (one spin lock: the
// critical sections are a few loads and stores, and an uncontended pthread mutex costs more
// than the rest of an op's allocation; the
// interpreter and the compile thread both allocate). A lowered thread (JIT compile and tuning:
// support/thread_pool.h) neither takes nor keeps the program's cached blocks: the program's next
// call never pays a system allocation for a block a compile holds, and a compile's odd sizes never
// fill the cache. Its blocks of kScratchMin bytes and more come from the JIT's scratch area
// instead (ScratchArena below).
// A block of kHugeBlockBytes or more is aligned to that size and its whole huge pages are offered
// to transparent huge pages (madvise): first touching a large tensor then takes one page fault
// per 2 MiB instead of 512 (on a virtual machine each fault costs microseconds; the reference
// cell's first runs spent about 100 ms in them).
#include <sanitizer/asan_interface.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <string>
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

// A system block; a large one aligned to and advised for huge pages (where the kernel offers
// them; elsewhere the advice is ignored).
void* systemAllocate(std::size_t size) {
  const bool huge = size >= kHugeBlockBytes;
  // posix_memalign, not aligned_alloc: a size need not be a multiple of 2 MiB (C11 requires it of
  // aligned_alloc, and ASan enforces that).
  void* ptr = nullptr;
  if (posix_memalign(&ptr, huge ? kHugeBlockBytes : 64, size) != 0) return nullptr;
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

// The JIT's scratch area: one reserved address range (kScratchBytes, no memory until touched) that
// lowered threads' blocks of kScratchMin bytes and more are carved from, first fit by address, and
// freed back into (by any thread). A validation's random inputs, poisoned outputs and reference
// outputs, and a tuning run's buffers, then land on pages an earlier compile already faulted in:
// a fresh block from the system allocator is fresh pages, and a first touch costs ~1-11 us per
// 4 KiB page (11 us on a PVM guest: most of validating a kernel with 1 MiB outputs). Where
// transparent huge pages can be asked for (mode `always` or `madvise`), the range is advised
// MADV_HUGEPAGE: one fault maps 2 MiB. release() hands the free pages back (MADV_DONTNEED): those
// past the first kScratchKeepBytes when the JIT goes idle, all of them on trim(); the reservation
// stays. RSS: at most the high-water mark of the blocks handed out since the last release (after
// one, at most kScratchKeepBytes) (AllocatorStats::scratch_bytes counts its free part). Under ASan its free
// ranges are poisoned (no-ops elsewhere), so a use after free or an overrun into free space is still
// reported as it is for a system block.
constexpr std::size_t kScratchMin = std::size_t{16} << 10;
constexpr std::size_t kScratchBytes = std::size_t{64} << 20;
// What releaseScratch() (the JIT idle) keeps: the first 16 MiB's pages, where the next compile's
// first blocks land (first fit by address). Released on every idle, each compile first-touched its
// buffers again: the 3-D Add's validation (4 MiB operands) 0.8 ms of its 1 ms, and 4 ms more per
// 2 MiB huge page the host had to back first (BENCHMARKS.md, "The region's validation on the
// planning run's pages"). trim() releases them too.
constexpr std::size_t kScratchKeepBytes = std::size_t{16} << 20;
constexpr std::size_t kHugePage = std::size_t{2} << 20;

bool hugePagesAvailable() {
  static const bool available = [] {
    std::ifstream file("/sys/kernel/mm/transparent_hugepage/enabled");
    std::string modes;
    std::getline(file, modes);
    return modes.find("[always]") != std::string::npos || modes.find("[madvise]") != std::string::npos;
  }();
  return available;
}

struct ScratchArena {
  char* base = nullptr;  // kHugePage aligned; nullptr: not reserved (or failed)
  bool reserve_failed = false;
  std::map<std::size_t, std::size_t> free_at;  // offset -> length of each free range, coalesced
  std::size_t live = 0;                        // bytes handed out
  std::size_t high = 0;                        // end of the highest block handed out since the last release

  bool contains(const void* ptr) const {
    const auto* p = static_cast<const char*>(ptr);
    return base != nullptr && p >= base && p < base + kScratchBytes;
  }
  bool reserve() {
    if (base != nullptr || reserve_failed) return base != nullptr;
    void* range = mmap(nullptr, kScratchBytes + kHugePage, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (range == MAP_FAILED) {
      reserve_failed = true;
      return false;
    }
    // Keep the kHugePage-aligned part (huge pages need it), unmap the rest.
    const auto start = reinterpret_cast<std::uintptr_t>(range);
    const std::uintptr_t aligned = (start + kHugePage - 1) & ~(kHugePage - 1);
    if (aligned > start) munmap(range, aligned - start);
    if (const std::size_t tail = kHugePage - (aligned - start); tail > 0) {
      munmap(reinterpret_cast<char*>(aligned) + kScratchBytes, tail);
    }
    base = reinterpret_cast<char*>(aligned);
    if (hugePagesAvailable()) madvise(base, kScratchBytes, MADV_HUGEPAGE);  // best effort: 4 KiB pages if refused
    free_at[0] = kScratchBytes;
    ASAN_POISON_MEMORY_REGION(base, kScratchBytes);
    return true;
  }
  // A block of `size` bytes (a multiple of 4 KiB); nullptr when no free range holds it.
  void* take(std::size_t size) {
    if (!reserve()) return nullptr;
    for (auto it = free_at.begin(); it != free_at.end(); ++it) {
      if (it->second < size) continue;
      const std::size_t offset = it->first, length = it->second;
      free_at.erase(it);
      if (length > size) free_at[offset + size] = length - size;
      live += size;
      high = std::max(high, offset + size);
      ASAN_UNPOISON_MEMORY_REGION(base + offset, size);
      return base + offset;
    }
    return nullptr;
  }
  void give(void* ptr, std::size_t size) {
    std::size_t offset = static_cast<std::size_t>(static_cast<char*>(ptr) - base);
    ASAN_POISON_MEMORY_REGION(ptr, size);
    live -= size;
    auto next = free_at.lower_bound(offset);
    if (next != free_at.end() && next->first == offset + size) {
      size += next->second;
      next = free_at.erase(next);
    }
    if (next != free_at.begin()) {
      auto previous = std::prev(next);
      if (previous->first + previous->second == offset) {
        previous->second += size;
        return;
      }
    }
    free_at[offset] = size;
  }
  // Free bytes that may hold pages (below the high-water mark).
  std::size_t residentFree() const { return high - std::min(high, live); }
  // Hands every free page from `keep` bytes on up to the high-water mark back to the system; the
  // first `keep` bytes' pages stay.
  void release(std::size_t keep) {
    if (base == nullptr || high <= keep) return;
    for (const auto& [offset, length] : free_at) {
      if (offset >= high) break;
      const std::size_t begin = std::max(offset, keep), end = std::min(offset + length, high);
      if (begin < end) madvise(base + begin, end - begin, MADV_DONTNEED);
    }
    // The new high-water mark: the start of the last free range when it reaches the end (or the
    // kept part's end, when that is higher).
    auto last = free_at.empty() ? free_at.end() : std::prev(free_at.end());
    const std::size_t used =
        last != free_at.end() && last->first + last->second == kScratchBytes ? last->first : kScratchBytes;
    high = std::max(used, keep);
  }
};

struct CachingAllocator::Impl {
  SpinLock mutex;
  ScratchArena scratch;
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
  // A lowered thread's larger blocks: from the scratch area (where the cache may keep that much).
  const bool scratch = !cached && size >= kScratchMin &&
                       Tunables::get(Tunable::AllocatorCacheBytes) >= static_cast<std::int64_t>(kScratchBytes);
  {
    std::lock_guard<SpinLock> lock(state.mutex);
    ++state.stats.requests;
    std::vector<void*>& list = state.listFor(size);
    if (scratch) {
      if (void* ptr = state.scratch.take(size); ptr != nullptr) {
        // No system allocation, but fault injection counts it like one (the compile thread's
        // allocations fail as often as before).
        if (const std::int64_t every = Tunables::get(Tunable::FaultAllocEvery); every > 0) {
          static std::atomic<std::int64_t> scratch_attempts{0};
          if ((scratch_attempts.fetch_add(1, std::memory_order_relaxed) + 1) % every == 0) {
            state.scratch.give(ptr, size);
            return makeError(ErrorCode::OutOfMemory,
                             "system allocation of {} bytes failed (injected: tunable fault_alloc_every={})", size,
                             every);
          }
        }
        state.stats.live_bytes += static_cast<std::int64_t>(size);
        if (state.stats.live_bytes > state.stats.peak_bytes) state.stats.peak_bytes = state.stats.live_bytes;
        *capacity = size;
        return ptr;
      }
    }
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
    if (state.scratch.contains(ptr)) {  // back to the scratch area, whichever thread frees it
      state.scratch.give(ptr, capacity);
      return;
    }
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
  AllocatorStats stats = impl().stats;
  stats.scratch_bytes = static_cast<std::int64_t>(impl().scratch.residentFree());
  return stats;
}

void CachingAllocator::releaseScratch() {
  std::lock_guard<SpinLock> lock(impl().mutex);
  impl().scratch.release(kScratchKeepBytes);
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
  impl().scratch.release(0);
}

}  // namespace shapevm
