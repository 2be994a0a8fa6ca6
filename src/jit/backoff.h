// SPDX-License-Identifier: Apache-2.0
// Failure back-off and blacklisting, shared by the JIT's per-site (O1) and per-range (O2)
// bookkeeping: after the n-th failed compile or validation the next attempt waits
// BackoffExecutions << (n - 1) region executions; after BlacklistAfter failures there is none.
// Invariant: once blacklisted, recordFailure is never called again (callers stop trying).
#pragma once

#include <cstdint>

#include "support/tunables.h"

namespace shapevm::jit {

struct FailureBackoff {
  int failures = 0;
  std::uint64_t retry_after = 0;  // region executions before another attempt

  // What one more failure means: blacklisted now, or retry after `wait` more executions.
  struct Verdict {
    bool blacklisted = false;
    std::uint64_t wait = 0;
  };

  // Records a failure seen when the region had run `executions` times.
  Verdict recordFailure(std::uint64_t executions) {
    ++failures;
    if (failures >= Tunables::get(Tunable::BlacklistAfter)) return Verdict{true, 0};
    const std::uint64_t wait = static_cast<std::uint64_t>(Tunables::get(Tunable::BackoffExecutions)) << (failures - 1);
    retry_after = executions + wait;
    return Verdict{false, wait};
  }
  // True when the back-off after the last failure has passed.
  bool mayRetry(std::uint64_t executions) const { return executions >= retry_after; }
};

}  // namespace shapevm::jit
