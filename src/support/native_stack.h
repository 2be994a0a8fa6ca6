// SPDX-License-Identifier: Apache-2.0
// How much native stack the calling thread has left. Recursive walks over user input (the
// parser, user-function calls in the interpreter) check it before going deeper, so a deep input
// ends in a LimitExceeded error rather than a stack overflow. Invariant: the bounds come from
// the thread itself (pthread_getattr_np), not from an assumed frame size or rlimit.
#pragma once

#include <cstddef>

namespace shapevm {

// Bytes a recursive walk must leave free for whatever runs at its deepest point (op kernels,
// error formatting, the sanitizers' bigger frames).
#if defined(__SANITIZE_ADDRESS__)
inline constexpr std::size_t kNativeStackReserve = std::size_t{2} << 20;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr std::size_t kNativeStackReserve = std::size_t{2} << 20;
#else
inline constexpr std::size_t kNativeStackReserve = std::size_t{512} << 10;
#endif
#else
inline constexpr std::size_t kNativeStackReserve = std::size_t{512} << 10;
#endif

// Bytes of native stack left below the caller's frame (SIZE_MAX when the bounds are unknown).
std::size_t nativeStackLeft();

// True when at least kNativeStackReserve bytes are left.
inline bool nativeStackHasRoom() {
  return nativeStackLeft() >= kNativeStackReserve;
}

}  // namespace shapevm
