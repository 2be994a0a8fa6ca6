// SPDX-License-Identifier: Apache-2.0
// O2 region fusion: building the inputs a range is planned and validated on (region_inputs.cc).
// Internal to the region files.
#pragma once

#include <span>
#include <vector>

#include "jit/region_plan.h"
#include "vm/profile.h"

namespace shapevm::jit {

// Which observed shapes a region is planned and validated on: each site's newest profile record,
// or its smallest (fewest input elements; ties: the newest). The smallest is what a warm install
// plans on (the reference run and validation cost scale with it); tuning times on the newest.
enum class PlanningShapes { Newest, Smallest };

// The record of `records` that `which` picks (nullptr when there is none).
const ProfileRecord* planningRecord(std::span<const ProfileRecord> records, PlanningShapes which);

// The planning/validation inputs of `p`'s externals (in p.externals order), from the profile
// records `which` picks at the range's sites (`records[k]` for range.sites[k]); fills each
// external's dtype and shape in p.values. Unsupported when an input is neither a tensor nor a
// reshape's target shape; JitError when no record shows one.
Expected<std::vector<Value>> planningInputs(RegionPlan& p, const FusionRange& range,
                                            std::span<const std::vector<ProfileRecord>> records, int compiles,
                                            PlanningShapes which = PlanningShapes::Newest);

}  // namespace shapevm::jit
