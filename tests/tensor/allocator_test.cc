// SPDX-License-Identifier: Apache-2.0
// CachingAllocator: 64-byte aligned blocks of a size class that covers the request with
// bounded waste, freed blocks reused without a system allocation, exact live/peak/cached
// accounting, trim(), the AllocatorCacheBytes and MaxTensorBytes limits, and consistent stats
// when two threads allocate and free at once, and a lowered (JIT) thread that neither takes nor
// keeps cached blocks. Tests measure deltas of the process-wide stats.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "shapevm/tensor.h"
#include "support/thread_pool.h"
#include "support/tunables.h"

namespace shapevm {
namespace {

class AllocatorTest : public testing::Test {
 protected:
  void SetUp() override {
    Tunables::resetToDefaults();
    allocator().trim();  // start from an empty cache so reuse is predictable
  }
  void TearDown() override { Tunables::resetToDefaults(); }
  static CachingAllocator& allocator() { return CachingAllocator::global(); }

  // Allocates or fails the test.
  static void* take(std::size_t nbytes, std::size_t* capacity) {
    Expected<void*> block = allocator().allocate(nbytes, capacity);
    EXPECT_TRUE(block.hasValue()) << block.status().toString();
    return block.hasValue() ? *block : nullptr;
  }
};

TEST_F(AllocatorTest, BlocksAre64ByteAlignedAndCoverTheRequest) {
  for (std::size_t nbytes : {std::size_t{0}, std::size_t{1}, std::size_t{63}, std::size_t{64}, std::size_t{65},
                             std::size_t{1000}, std::size_t{4096}, std::size_t{65535}, std::size_t{65537},
                             std::size_t{100000}, std::size_t{1} << 20, (std::size_t{3} << 20) + 7}) {
    SCOPED_TRACE(nbytes);
    std::size_t capacity = 0;
    void* block = take(nbytes, &capacity);
    ASSERT_NE(block, nullptr);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(block) % 64, 0u);
    EXPECT_EQ(capacity, CachingAllocator::sizeClass(nbytes));
    EXPECT_GE(capacity, nbytes);
    std::memset(block, 0x5A, capacity);  // the whole class is usable (ASan checks)
    allocator().free(block, capacity);
  }
}

// A system block of 2 MiB or more starts on a 2 MiB boundary (its whole huge pages are advised
// for transparent huge pages); blocks of 128 KiB or more are prefaulted. Either way the block is
// ordinary memory: random bytes written over all of it read back, through reuse from the cache.
TEST_F(AllocatorTest, LargeBlocksAreHugePageAlignedAndHoldWhatIsWritten) {
  std::mt19937 rng(23);
  for (std::size_t nbytes : {std::size_t{128} << 10, (std::size_t{1} << 20) + 3, std::size_t{2} << 20,
                             (std::size_t{3} << 20) + 7, std::size_t{9} << 20}) {
    SCOPED_TRACE(nbytes);
    for (int round = 0; round < 2; ++round) {  // a system allocation, then the cached block
      std::size_t capacity = 0;
      void* block = take(nbytes, &capacity);
      ASSERT_NE(block, nullptr);
      if (capacity >= (std::size_t{2} << 20)) {
        EXPECT_EQ(reinterpret_cast<std::uintptr_t>(block) % (std::size_t{2} << 20), 0u);
      }
      EXPECT_EQ(reinterpret_cast<std::uintptr_t>(block) % 64, 0u);
      std::vector<std::uint32_t> words(capacity / sizeof(std::uint32_t));
      for (std::uint32_t& w : words) w = static_cast<std::uint32_t>(rng());
      std::memcpy(block, words.data(), words.size() * sizeof(std::uint32_t));
      EXPECT_EQ(std::memcmp(block, words.data(), words.size() * sizeof(std::uint32_t)), 0);
      allocator().free(block, capacity);
    }
  }
}

TEST_F(AllocatorTest, SizeClassKnownValues) {
  EXPECT_EQ(CachingAllocator::sizeClass(0), 64u);
  EXPECT_EQ(CachingAllocator::sizeClass(1), 64u);
  EXPECT_EQ(CachingAllocator::sizeClass(64), 64u);
  EXPECT_EQ(CachingAllocator::sizeClass(65), 128u);
  EXPECT_EQ(CachingAllocator::sizeClass(1000), 1024u);
  EXPECT_EQ(CachingAllocator::sizeClass(65536), 65536u);
  EXPECT_EQ(CachingAllocator::sizeClass(65537), 81920u);   // 128 KiB / 8 steps above 64 KiB
  EXPECT_EQ(CachingAllocator::sizeClass(100000), 114688u);
  EXPECT_EQ(CachingAllocator::sizeClass(131072), 131072u);
  EXPECT_EQ(CachingAllocator::sizeClass(131073), 163840u);
}

TEST_F(AllocatorTest, SizeClassIsMonotonicCoveringAndBoundedWaste) {
  auto check = [](std::size_t n, std::size_t previous_class) {
    std::size_t c = CachingAllocator::sizeClass(n);
    EXPECT_GE(c, n);
    EXPECT_GE(c, 64u);
    EXPECT_EQ(c % 64, 0u) << "classes keep 64-byte alignment for aligned_alloc";
    EXPECT_GE(c, previous_class) << "monotonic";
    EXPECT_EQ(CachingAllocator::sizeClass(c), c) << "a class is its own class";
    if (n > 64) {
      EXPECT_LT(c, 2 * n) << "at most double";
    }
    if (n > 65536) {
      EXPECT_LT(4 * (c - n), n) << "under 25% waste above 64 KiB";
    }
    return c;
  };
  std::size_t previous = 0;
  for (std::size_t n = 0; n <= 300000; ++n) {
    previous = check(n, previous);
    if (testing::Test::HasFailure()) FAIL() << "at n = " << n;
  }
  std::mt19937_64 rng(3);
  std::vector<std::size_t> sizes;
  for (int i = 0; i < 100000; ++i) sizes.push_back(rng() % (std::size_t{1} << 40));
  std::sort(sizes.begin(), sizes.end());
  previous = 0;
  for (std::size_t n : sizes) {
    previous = check(n, previous);
    if (testing::Test::HasFailure()) FAIL() << "at n = " << n;
  }
}

TEST_F(AllocatorTest, ClassesAboveSixtyFourKiBAreFourPerOctave) {
  for (std::size_t power = std::size_t{1} << 17; power <= (std::size_t{1} << 30); power <<= 1) {
    std::vector<std::size_t> classes;
    for (std::size_t n = power / 2 + 1; n <= power; n += power / 64) classes.push_back(CachingAllocator::sizeClass(n));
    classes.push_back(CachingAllocator::sizeClass(power));
    classes.erase(std::unique(classes.begin(), classes.end()), classes.end());
    EXPECT_EQ(classes.size(), 4u) << power;
    EXPECT_EQ(classes.back(), power);
  }
}

// Fault injection (fault_alloc_every, scripts/fault_campaign.py): with N = 3, exactly one of
// every three system allocations fails, with OutOfMemory naming the tunable; cached blocks never
// fail; with the tunable back at 0 every allocation succeeds.
TEST_F(AllocatorTest, InjectedSystemAllocationFailuresAreClearErrors) {
  ASSERT_TRUE(Tunables::set(Tunable::FaultAllocEvery, 3).isOk());
  std::vector<std::pair<void*, std::size_t>> held;
  int failed = 0;
  for (int i = 0; i < 30; ++i) {
    std::size_t capacity = 0;
    Expected<void*> block = allocator().allocate(static_cast<std::size_t>(70000 + 4096 * i), &capacity);
    if (!block) {
      ++failed;
      EXPECT_EQ(block.status().code(), ErrorCode::OutOfMemory);
      EXPECT_NE(block.status().message().find("injected: tunable fault_alloc_every=3"), std::string::npos)
          << block.status().toString();
      continue;
    }
    held.emplace_back(*block, capacity);
  }
  EXPECT_EQ(failed, 10);
  // A freed block comes back from the cache: no system allocation, no injected failure.
  for (int i = 0; i < 6; ++i) {
    allocator().free(held.back().first, held.back().second);
    std::size_t capacity = 0;
    Expected<void*> again = allocator().allocate(held.back().second, &capacity);
    ASSERT_TRUE(again.hasValue()) << again.status().toString();
    held.back().first = *again;
  }
  ASSERT_TRUE(Tunables::set(Tunable::FaultAllocEvery, 0).isOk());
  for (int i = 0; i < 6; ++i) {
    std::size_t capacity = 0;
    void* ptr = take(static_cast<std::size_t>(300000 + 4096 * i), &capacity);
    held.emplace_back(ptr, capacity);
  }
  for (auto& [ptr, capacity] : held) allocator().free(ptr, capacity);
}

TEST_F(AllocatorTest, FreedBlocksAreReusedWithoutASystemAllocation) {
  const AllocatorStats s0 = allocator().stats();
  std::size_t capacity = 0;
  void* first = take(5000, &capacity);
  const AllocatorStats s1 = allocator().stats();
  EXPECT_EQ(s1.requests, s0.requests + 1);
  EXPECT_EQ(s1.system_allocations, s0.system_allocations + 1);
  allocator().free(first, capacity);

  // Any request of the same class gets the cached block back.
  std::size_t capacity2 = 0;
  void* second = take(4097, &capacity2);
  const AllocatorStats s2 = allocator().stats();
  EXPECT_EQ(capacity2, capacity);
  EXPECT_EQ(second, first);
  EXPECT_EQ(s2.requests, s0.requests + 2);
  EXPECT_EQ(s2.system_allocations, s0.system_allocations + 1) << "reuse must not reach the system";

  // A different class does not take it.
  std::size_t capacity3 = 0;
  void* third = take(100, &capacity3);
  EXPECT_NE(third, second);
  EXPECT_EQ(allocator().stats().system_allocations, s0.system_allocations + 2);
  allocator().free(second, capacity2);
  allocator().free(third, capacity3);
}

// A compile thread (lowered) allocating while the program holds cached blocks: it takes none of
// them (the program's next call would pay a system allocation) and keeps none of its own in the
// program's cache. Its large blocks come from the scratch area instead: a second compile reuses the
// pages the first freed (no system allocation), blocks freed by any thread go back there, and
// releaseScratch() hands the free pages back (scratch_bytes counts them until then).
TEST_F(AllocatorTest, LoweredThreadNeitherTakesNorKeepsCachedBlocks) {
  std::size_t capacity = 0;
  void* program_block = take(3 * 1024 * 1024 + 12345, &capacity);
  allocator().free(program_block, capacity);
  const AllocatorStats s0 = allocator().stats();
  ASSERT_EQ(s0.cached_bytes, static_cast<std::int64_t>(capacity));
  void* compile_block = nullptr;
  void* second_block = nullptr;
  void* handed_over = nullptr;
  std::size_t compile_capacity = 0, second_capacity = 0, handed_capacity = 0;
  AllocatorStats while_held, after_free, after_second;
  std::thread([&] {
    ASSERT_TRUE(lowerThreadPriority(2));
    compile_block = take(3 * 1024 * 1024 + 12345, &compile_capacity);
    while_held = allocator().stats();
    std::memset(compile_block, 0x5a, compile_capacity);  // usable memory
    allocator().free(compile_block, compile_capacity);
    after_free = allocator().stats();
    second_block = take(2 * 1024 * 1024, &second_capacity);
    std::memset(second_block, 0x33, second_capacity);
    allocator().free(second_block, second_capacity);
    after_second = allocator().stats();
    handed_over = take(100000, &handed_capacity);  // freed by the program below
    std::memset(handed_over, 0x11, handed_capacity);
  }).join();
  ASSERT_NE(compile_block, nullptr);
  EXPECT_EQ(compile_capacity, capacity);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(compile_block) % 64, 0u);
  EXPECT_NE(compile_block, program_block) << "the program's cached block went to the compile thread";
  EXPECT_EQ(while_held.cached_bytes, s0.cached_bytes);
  EXPECT_EQ(while_held.live_bytes, s0.live_bytes + static_cast<std::int64_t>(compile_capacity));
  EXPECT_EQ(after_free.cached_bytes, s0.cached_bytes) << "the compile thread's block was kept in the program's cache";
  EXPECT_EQ(after_free.live_bytes, s0.live_bytes);
  EXPECT_GE(after_free.scratch_bytes, static_cast<std::int64_t>(compile_capacity)) << "its pages are kept for reuse";
  EXPECT_EQ(second_block, compile_block) << "a later compile block reuses the faulted pages";
  EXPECT_EQ(after_second.system_allocations, while_held.system_allocations);
  // A block the compile thread allocated and the program frees goes back to the scratch area.
  allocator().free(handed_over, handed_capacity);
  EXPECT_EQ(allocator().stats().live_bytes, s0.live_bytes);
  EXPECT_EQ(allocator().stats().cached_bytes, s0.cached_bytes);
  allocator().releaseScratch();
  EXPECT_LE(allocator().stats().scratch_bytes, std::int64_t{16} << 20) << "released past the first 16 MiB";
  // The program still finds its block.
  std::size_t again = 0;
  EXPECT_EQ(take(3 * 1024 * 1024 + 12345, &again), program_block);
  EXPECT_EQ(allocator().stats().system_allocations, s0.system_allocations);
  allocator().free(program_block, again);
}

// The scratch area under two lowered threads allocating and freeing at once (blocks of 16 KiB to
// 1 MiB): no block handed to both, every block 64-byte aligned and usable, live bytes back where
// they started, and released pages are usable again (zero after MADV_DONTNEED, then rewritten).
TEST_F(AllocatorTest, ScratchAreaBlocksAreDisjointUnderTwoLoweredThreads) {
  const AllocatorStats s0 = allocator().stats();
  std::atomic<int> problems{0};
  auto worker = [&problems](unsigned seed) {
    if (!lowerThreadPriority(1)) ++problems;
    std::mt19937 rng(seed);
    struct Held {
      unsigned char* block;
      std::size_t capacity;
      unsigned char tag;
    };
    std::vector<Held> held;
    for (int i = 0; i < 3000; ++i) {
      if (held.size() < 12 && (held.empty() || rng() % 2 == 0)) {
        const std::size_t nbytes = (std::size_t{16} << 10) + rng() % (std::size_t{1} << 20);
        std::size_t capacity = 0;
        Expected<void*> block = CachingAllocator::global().allocate(nbytes, &capacity);
        if (!block.hasValue() || capacity < nbytes || reinterpret_cast<std::uintptr_t>(*block) % 64 != 0) {
          ++problems;
          continue;
        }
        auto tag = static_cast<unsigned char>(seed * 31 + static_cast<unsigned>(i));
        auto* bytes = static_cast<unsigned char*>(*block);
        std::memset(bytes, tag, capacity);
        held.push_back({bytes, capacity, tag});
      } else {
        const std::size_t pick = rng() % held.size();
        const Held h = held[pick];
        held.erase(held.begin() + static_cast<std::ptrdiff_t>(pick));
        for (std::size_t k = 0; k < h.capacity; k += 4096) {
          if (h.block[k] != h.tag) ++problems;
        }
        if (h.block[h.capacity - 1] != h.tag) ++problems;
        CachingAllocator::global().free(h.block, h.capacity);
      }
      if (i % 500 == 499) CachingAllocator::global().releaseScratch();  // with blocks still live
    }
    for (const Held& h : held) CachingAllocator::global().free(h.block, h.capacity);
  };
  std::thread first(worker, 5u), second(worker, 6u);
  first.join();
  second.join();
  EXPECT_EQ(problems.load(), 0);
  EXPECT_EQ(allocator().stats().live_bytes, s0.live_bytes);
  allocator().releaseScratch();
  EXPECT_LE(allocator().stats().scratch_bytes, std::int64_t{16} << 20);
}

// The JIT idle (releaseScratch) keeps the scratch area's first 16 MiB of pages, where the next
// compile's first blocks land (first fit: the same addresses, no fresh page to fault in), and hands
// back the rest; trim() hands back everything. Contents of kept pages are whatever the last compile
// left (a compile's buffers are written before they are read); released ones read zero.
TEST_F(AllocatorTest, ScratchReleaseKeepsTheFirst16MiBForTheNextCompile) {
  allocator().trim();
  constexpr std::size_t kBlock = std::size_t{6} << 20;  // three blocks: 18 MiB, past the kept part
  std::mt19937 rng(static_cast<unsigned>(std::random_device{}()));
  const auto tag = static_cast<unsigned char>(1 + rng() % 250);
  void* first[3] = {};
  void* again[3] = {};
  std::size_t capacity[3] = {};
  AllocatorStats held, released, trimmed;
  std::thread([&] {
    ASSERT_TRUE(lowerThreadPriority(1));
    for (int k = 0; k < 3; ++k) {
      first[k] = take(kBlock, &capacity[k]);
      std::memset(first[k], tag, capacity[k]);
    }
    for (int k = 0; k < 3; ++k) allocator().free(first[k], capacity[k]);
    held = allocator().stats();
    allocator().releaseScratch();  // what the JIT does when it goes idle
    released = allocator().stats();
    for (int k = 0; k < 3; ++k) again[k] = take(kBlock, &capacity[k]);
  }).join();
  for (int k = 0; k < 3; ++k) EXPECT_EQ(again[k], first[k]) << "block " << k << ": first fit, same pages";
  EXPECT_GE(held.scratch_bytes, static_cast<std::int64_t>(3 * kBlock));
  EXPECT_EQ(released.scratch_bytes, std::int64_t{16} << 20) << "the first 16 MiB stay";
  const auto* kept = static_cast<const unsigned char*>(again[0]);
  const auto* past = static_cast<const unsigned char*>(again[2]);
  EXPECT_EQ(kept[0], tag) << "a kept page";
  EXPECT_EQ(kept[kBlock - 1], tag);
  const std::size_t past_keep = (std::size_t{16} << 20) - 2 * kBlock;  // into the third block
  EXPECT_EQ(past[past_keep - 1], tag) << "the last kept byte";
  EXPECT_EQ(past[past_keep], 0) << "released: the system's fresh zero page";
  EXPECT_EQ(past[kBlock - 1], 0);
  for (int k = 0; k < 3; ++k) allocator().free(again[k], capacity[k]);
  allocator().trim();
  trimmed = allocator().stats();
  EXPECT_EQ(trimmed.scratch_bytes, 0) << "trim() keeps no page";
}

// With a cache limit below the scratch area's size, a lowered thread's blocks come from the system
// and go back to it (the limit on kept bytes holds for the scratch area too).
TEST_F(AllocatorTest, SmallCacheLimitKeepsNoScratch) {
  ASSERT_TRUE(Tunables::set(Tunable::AllocatorCacheBytes, 1 << 20).isOk());
  allocator().releaseScratch();
  AllocatorStats s0, s1;
  std::thread([&] {
    ASSERT_TRUE(lowerThreadPriority(1));
    s0 = allocator().stats();
    std::size_t capacity = 0;
    void* block = take(200000, &capacity);
    std::memset(block, 1, capacity);
    allocator().free(block, capacity);
    s1 = allocator().stats();
  }).join();
  EXPECT_EQ(s1.system_allocations, s0.system_allocations + 1);
  EXPECT_EQ(s1.scratch_bytes, 0);
  EXPECT_EQ(s1.cached_bytes, s0.cached_bytes);
}

TEST_F(AllocatorTest, TensorsReuseCachedStorage) {
  const AllocatorStats s0 = allocator().stats();
  for (int i = 0; i < 50; ++i) {
    Expected<Tensor> t = Tensor::empty(DType::Float32, Shape{33, 65});
    ASSERT_TRUE(t.hasValue());
  }
  const AllocatorStats s1 = allocator().stats();
  EXPECT_EQ(s1.requests, s0.requests + 50);
  EXPECT_EQ(s1.system_allocations, s0.system_allocations + 1);
  EXPECT_EQ(s1.live_bytes, s0.live_bytes);
}

TEST_F(AllocatorTest, LivePeakAndCachedAccounting) {
  allocator().resetPeak();
  const AllocatorStats s0 = allocator().stats();
  EXPECT_EQ(s0.cached_bytes, 0);
  EXPECT_EQ(s0.peak_bytes, s0.live_bytes);

  std::size_t a_capacity = 0, b_capacity = 0;
  void* a = take(10000, &a_capacity);  // class 16384
  void* b = take(200000, &b_capacity);
  const auto a_bytes = static_cast<std::int64_t>(a_capacity), b_bytes = static_cast<std::int64_t>(b_capacity);
  EXPECT_EQ(a_bytes, 16384);
  AllocatorStats s1 = allocator().stats();
  EXPECT_EQ(s1.live_bytes, s0.live_bytes + a_bytes + b_bytes) << "live counts whole classes";
  EXPECT_EQ(s1.peak_bytes, s1.live_bytes);

  allocator().free(a, a_capacity);
  AllocatorStats s2 = allocator().stats();
  EXPECT_EQ(s2.live_bytes, s0.live_bytes + b_bytes);
  EXPECT_EQ(s2.cached_bytes, a_bytes);
  EXPECT_EQ(s2.peak_bytes, s1.peak_bytes) << "peak does not drop on free";

  allocator().free(b, b_capacity);
  AllocatorStats s3 = allocator().stats();
  EXPECT_EQ(s3.live_bytes, s0.live_bytes);
  EXPECT_EQ(s3.cached_bytes, a_bytes + b_bytes);

  // Taking a cached block moves it back from cached to live.
  void* again = take(9000, &a_capacity);
  AllocatorStats s4 = allocator().stats();
  EXPECT_EQ(s4.cached_bytes, b_bytes);
  EXPECT_EQ(s4.live_bytes, s0.live_bytes + a_bytes);
  EXPECT_EQ(s4.peak_bytes, s1.peak_bytes);
  allocator().free(again, a_capacity);

  allocator().resetPeak();
  EXPECT_EQ(allocator().stats().peak_bytes, s0.live_bytes);

  allocator().trim();
  AllocatorStats s5 = allocator().stats();
  EXPECT_EQ(s5.cached_bytes, 0);
  EXPECT_EQ(s5.live_bytes, s0.live_bytes) << "trim only touches cached blocks";
}

TEST_F(AllocatorTest, TrimSendsTheNextRequestToTheSystem) {
  std::size_t capacity = 0;
  void* block = take(3000, &capacity);
  allocator().free(block, capacity);
  ASSERT_EQ(allocator().stats().cached_bytes, static_cast<std::int64_t>(capacity));
  allocator().trim();
  EXPECT_EQ(allocator().stats().cached_bytes, 0);
  const std::int64_t system_before = allocator().stats().system_allocations;
  void* fresh = take(3000, &capacity);
  EXPECT_EQ(allocator().stats().system_allocations, system_before + 1);
  allocator().free(fresh, capacity);
}

TEST_F(AllocatorTest, CacheLimitZeroKeepsNothing) {
  ASSERT_TRUE(Tunables::set(Tunable::AllocatorCacheBytes, 0).isOk());
  const AllocatorStats s0 = allocator().stats();
  std::size_t capacity = 0;
  void* block = take(2048, &capacity);
  allocator().free(block, capacity);
  EXPECT_EQ(allocator().stats().cached_bytes, 0);
  EXPECT_EQ(allocator().stats().live_bytes, s0.live_bytes);
  block = take(2048, &capacity);
  EXPECT_EQ(allocator().stats().system_allocations, s0.system_allocations + 2) << "nothing was cached to reuse";
  allocator().free(block, capacity);
}

TEST_F(AllocatorTest, CacheLimitIsHonouredExactly) {
  ASSERT_TRUE(Tunables::set(Tunable::AllocatorCacheBytes, 3 * 4096).isOk());
  std::vector<void*> blocks;
  std::size_t capacity = 0;
  for (int i = 0; i < 5; ++i) blocks.push_back(take(4096, &capacity));
  ASSERT_EQ(capacity, 4096u);
  for (void* block : blocks) allocator().free(block, capacity);
  EXPECT_EQ(allocator().stats().cached_bytes, 3 * 4096) << "exactly the limit is kept, the rest released";

  // A block bigger than the remaining room is released even when smaller ones would fit.
  ASSERT_TRUE(Tunables::set(Tunable::AllocatorCacheBytes, 3 * 4096 + 100).isOk());
  void* big = take(8192, &capacity);
  allocator().free(big, capacity);
  EXPECT_EQ(allocator().stats().cached_bytes, 3 * 4096);
}

TEST_F(AllocatorTest, MaxTensorBytesRejectsLargeRequests) {
  ASSERT_TRUE(Tunables::set(Tunable::MaxTensorBytes, 4096).isOk());
  const AllocatorStats s0 = allocator().stats();
  std::size_t capacity = 123;
  Expected<void*> too_big = allocator().allocate(4097, &capacity);
  ASSERT_FALSE(too_big.hasValue());
  EXPECT_EQ(too_big.status().code(), ErrorCode::OutOfMemory);
  EXPECT_EQ(too_big.status().message(),
            "allocation of 4097 bytes exceeds the limit of 4096 bytes (tunable max_tensor_bytes)");
  EXPECT_EQ(allocator().stats().live_bytes, s0.live_bytes);
  EXPECT_EQ(allocator().stats().system_allocations, s0.system_allocations);
  void* fits = take(4096, &capacity);
  ASSERT_NE(fits, nullptr);
  allocator().free(fits, capacity);
}

TEST_F(AllocatorTest, FreeOfNullIsANoOp) {
  const AllocatorStats s0 = allocator().stats();
  allocator().free(nullptr, 4096);
  const AllocatorStats s1 = allocator().stats();
  EXPECT_EQ(s1.live_bytes, s0.live_bytes);
  EXPECT_EQ(s1.cached_bytes, s0.cached_bytes);
}

TEST_F(AllocatorTest, TwoThreadsAllocatingAndFreeingKeepConsistentStats) {
  const AllocatorStats s0 = allocator().stats();
  constexpr int kIterations = 20000;
  std::atomic<int> problems{0};
  std::atomic<std::int64_t> allocations{0};
  auto worker = [&problems, &allocations](unsigned seed) {
    std::mt19937 rng(seed);
    struct Held {
      unsigned char* block;
      std::size_t capacity;
      unsigned char tag;
    };
    std::vector<Held> held;
    for (int i = 0; i < kIterations; ++i) {
      if (held.size() < 16 && (held.empty() || rng() % 2 == 0)) {
        std::size_t nbytes = 1 + rng() % (rng() % 8 == 0 ? 300000 : 5000);
        std::size_t capacity = 0;
        Expected<void*> block = CachingAllocator::global().allocate(nbytes, &capacity);
        ++allocations;
        if (!block.hasValue() || capacity < nbytes || reinterpret_cast<std::uintptr_t>(*block) % 64 != 0) {
          ++problems;
          continue;
        }
        auto tag = static_cast<unsigned char>(seed * 31 + static_cast<unsigned>(i));
        auto* bytes = static_cast<unsigned char*>(*block);
        bytes[0] = tag;
        bytes[capacity - 1] = tag;
        held.push_back({bytes, capacity, tag});
      } else {
        std::size_t pick = rng() % held.size();
        Held h = held[pick];
        held.erase(held.begin() + static_cast<std::ptrdiff_t>(pick));
        // A block handed to both threads at once would show the other thread's tag here.
        if (h.block[0] != h.tag || h.block[h.capacity - 1] != h.tag) ++problems;
        CachingAllocator::global().free(h.block, h.capacity);
      }
    }
    for (const Held& h : held) CachingAllocator::global().free(h.block, h.capacity);
  };
  std::thread first(worker, 1u), second(worker, 2u);
  first.join();
  second.join();

  const AllocatorStats s1 = allocator().stats();
  EXPECT_EQ(problems.load(), 0);
  EXPECT_EQ(s1.live_bytes, s0.live_bytes) << "every block was freed";
  EXPECT_EQ(s1.requests - s0.requests, allocations.load()) << "no request lost or double-counted";
  EXPECT_LE(s1.system_allocations - s0.system_allocations, s1.requests - s0.requests);
  EXPECT_LT(s1.system_allocations - s0.system_allocations, (s1.requests - s0.requests) / 4)
      << "most requests should be served from the cache";
  EXPECT_GE(s1.cached_bytes, 0);
  EXPECT_GE(s1.peak_bytes, s1.live_bytes);
  allocator().trim();
  EXPECT_EQ(allocator().stats().cached_bytes, 0);
}

}  // namespace
}  // namespace shapevm
