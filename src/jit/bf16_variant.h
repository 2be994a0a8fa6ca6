// SPDX-License-Identifier: Apache-2.0
// The bfloat16 matmul's default variant per host: the CPU's pair dot products (AVX512_BF16
// vdpbf16ps, KernelParams::bf16_dot = 1) or widening to float32 and FMAs (bf16_dot = -1). The
// default (bf16_dot = 0) is measured, not fixed: the AutoTuner times both variants of the
// default tile on every bfloat16 matmul it tunes (side by side in interleaved rounds, after the
// sweep: one sample of each followed the load), records the two times in the tuning database
// (TuningRecord::bf16_pairs_us / bf16_widening_us) and sets the verdict of this host's records
// here (tune/auto_tuner.h); the matmul family reads it when it resolves a default plan. Before any
// measurement on a CPU the prior holds: pairs where the CPU has them (half the steps).
// The kernel cache's key names the variant a default resolves to (bf16DefaultResolved of the
// backend's target CPU, see kernelCacheKey), so a kernel kept on disk from before the verdict
// changed is not found under the new one (tuned kernels name the variant in their params: the
// twin's bf16_dot is explicit, and a recorded default winner of the other variant is answered as
// the twin).
// Backend-neutral on purpose: the tuner reaches the LLVM CPU backend only through jit/ headers.
// Keyed by the backend's target CPU name (BackendCapabilities::target, e.g. "znver5"), the same
// name the tuning database's records carry. Thread-safe.
#pragma once

#include <map>
#include <mutex>
#include <string>

namespace shapevm::jit {

enum class Bf16Variant { Unmeasured, Pairs, Widening };

namespace detail {
struct Bf16Defaults {
  std::mutex mutex;
  std::map<std::string, Bf16Variant> by_cpu;
};
inline Bf16Defaults& bf16Defaults() {
  static Bf16Defaults defaults;
  return defaults;
}
}  // namespace detail

// Unmeasured clears the CPU's verdict (the prior holds again).
inline void setBf16Default(const std::string& cpu, Bf16Variant variant) {
  detail::Bf16Defaults& d = detail::bf16Defaults();
  std::lock_guard<std::mutex> lock(d.mutex);
  if (variant == Bf16Variant::Unmeasured) {
    d.by_cpu.erase(cpu);
  } else {
    d.by_cpu[cpu] = variant;
  }
}

inline Bf16Variant bf16Default(const std::string& cpu) {
  detail::Bf16Defaults& d = detail::bf16Defaults();
  std::lock_guard<std::mutex> lock(d.mutex);
  auto it = d.by_cpu.find(cpu);
  return it == d.by_cpu.end() ? Bf16Variant::Unmeasured : it->second;
}

// What a default bfloat16 matmul (KernelParams::bf16_dot = 0) compiled for `cpu` runs, where the
// target has pair dot products: widening where the verdict says so, else pairs (the prior).
inline Bf16Variant bf16DefaultResolved(const std::string& cpu) {
  return bf16Default(cpu) == Bf16Variant::Widening ? Bf16Variant::Widening : Bf16Variant::Pairs;
}

inline const char* bf16VariantName(Bf16Variant variant) {
  switch (variant) {
    case Bf16Variant::Pairs: return "pairs";
    case Bf16Variant::Widening: return "widening";
    case Bf16Variant::Unmeasured: break;
  }
  return "unmeasured";
}

}  // namespace shapevm::jit
