// SPDX-License-Identifier: Apache-2.0
// The JIT's view of the AutoTuner (implemented one layer up, in src/tune): given a kernel family
// and a spec, choose the KernelParams to compile with. The compile thread calls it before codegen
// at O2; the interpreter keeps running meanwhile. A tuner may answer from its database (no timing)
// or by compiling and timing the family's searchSpace() candidates on example inputs.
// Invariant: whatever the tuner answers is compiled, validated and installed through the same path
// as an untuned kernel; a tuner error only means "use the defaults" (logged), never a wrong result.
#pragma once

#include <span>
#include <string>

#include "jit/backend.h"
#include "jit/kernel_abi.h"

namespace shapevm::jit {

struct TuneOutcome {
  KernelParams params;          // the winner (default params when nothing was tuned)
  bool from_database = false;   // answered from the tuning database without timing
  int candidates = 0;           // candidates in the search space
  int timed = 0;                // candidates compiled and timed
  int failed = 0;               // candidates that failed to compile/run (counted as infinitely slow)
  double tuning_ms = 0.0;       // wall time spent tuning (compiling + timing candidates)
  double best_us = 0.0;         // the winner's median time per call (0 when from the database)
  double default_us = 0.0;      // the default candidate's median time (0 when not timed)
};

// What tuning one kernel would cost and bring (the JIT's pay-off aware tiering weighs the two).
struct TuneEstimate {
  double cost_ms = 0.0;  // compile + time the candidates it would try (0: answered from its database)
  double gain = 1.0;     // expected fraction of the kernel's time saved (0..1)
};

class Tuner {
 public:
  virtual ~Tuner() = default;
  // `compile_ms`: what compiling this kernel once took (the untuned install's codegen share).
  virtual TuneEstimate estimate(KernelBackend& engine, const KernelFamily& family, const KernelSpec& spec,
                                double compile_ms) const {
    (void)engine, (void)family, (void)spec, (void)compile_ms;
    return {};
  }
  // `examples` are inputs of the observed shapes (fresh scratch tensors are fine to build from them).
  virtual Expected<TuneOutcome> tune(KernelBackend& engine, const KernelFamily& family, const KernelSpec& spec,
                                     std::span<const Value* const> examples) = 0;
};

}  // namespace shapevm::jit
