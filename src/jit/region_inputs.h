// SPDX-License-Identifier: Apache-2.0
// O2 region fusion: building the inputs a range is planned and validated on (region_inputs.cc).
// Internal to the region files.
#pragma once

#include <span>
#include <vector>

#include "jit/region_plan.h"
#include "vm/profile.h"

namespace shapevm::jit {

// The planning/validation inputs of `p`'s externals (in p.externals order), from the newest
// profile records of the range's sites (`records[k]` for range.sites[k]); fills each external's
// dtype and shape in p.values. Unsupported when an input is neither a tensor nor a reshape's
// target shape; JitError when no record shows one.
Expected<std::vector<Value>> planningInputs(RegionPlan& p, const FusionRange& range,
                                            std::span<const std::vector<ProfileRecord>> records, int compiles);

}  // namespace shapevm::jit
