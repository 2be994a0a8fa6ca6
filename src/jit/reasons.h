// SPDX-License-Identifier: Apache-2.0
// JitReason: why a site runs interpreted (abort_reasons.def is the table).
#pragma once

#include <cstdint>
#include <string_view>

namespace shapevm::jit {

enum class JitReason : std::uint8_t {
#define SVM_JIT_REASON(name, meaning) name,
#include "jit/abort_reasons.def"
#undef SVM_JIT_REASON
  kCount
};
inline constexpr int kNumJitReasons = static_cast<int>(JitReason::kCount);

std::string_view jitReasonName(JitReason reason);     // "GuardRange"
std::string_view jitReasonMeaning(JitReason reason);  // "guard miss: a dim outside every compiled range"

}  // namespace shapevm::jit
