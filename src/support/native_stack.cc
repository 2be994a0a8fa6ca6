// SPDX-License-Identifier: Apache-2.0
// nativeStackLeft(): the thread's stack bounds, read once per thread and cached.
#include "support/native_stack.h"

#include <pthread.h>

#include <cstdint>
#include <limits>

namespace shapevm {
namespace {

// The lowest usable address of this thread's stack (0: unknown).
std::uintptr_t stackLow() {
  thread_local std::uintptr_t low = [] {
    pthread_attr_t attr;
    if (pthread_getattr_np(pthread_self(), &attr) != 0) return std::uintptr_t{0};
    void* base = nullptr;
    std::size_t size = 0;
    std::size_t guard = 0;
    const bool ok = pthread_attr_getstack(&attr, &base, &size) == 0;
    pthread_attr_getguardsize(&attr, &guard);
    pthread_attr_destroy(&attr);
    if (!ok || base == nullptr) return std::uintptr_t{0};
    return reinterpret_cast<std::uintptr_t>(base) + guard;
  }();
  return low;
}

}  // namespace

std::size_t nativeStackLeft() {
  const std::uintptr_t low = stackLow();
  // The frame address, not a local's: under ASan's fake stacks a local may live on the heap.
  const auto here = reinterpret_cast<std::uintptr_t>(__builtin_frame_address(0));
  if (low == 0) return std::numeric_limits<std::size_t>::max();
  return here > low ? here - low : 0;
}

}  // namespace shapevm
