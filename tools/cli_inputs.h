// SPDX-License-Identifier: Apache-2.0
// How `shapevm run` turns flags into function arguments: inputs from .npz/.npy matched to
// parameters by name, scalar arguments, and generated (seeded random) inputs whose dynamic
// dims follow a `--dim` schedule that cycles per iteration. A generated parameter whose shape token is
// fully static (a weight or bias) is drawn once per run and reused every iteration; one with a dynamic
// dim (per-iteration data) is drawn afresh each iteration. Both are reproducible from `--seed`.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "bytecode/module.h"
#include "session/stats_report.h"
#include "shapevm/value.h"

namespace shapevm {

// One `--dim` flag: `NAME=V[,V...]` (a named dynamic dim, or `?N`) or `PARAM.AXIS=V[,V...]`.
struct DimSchedule {
  std::string target;
  std::vector<std::int64_t> values;
};
Expected<DimSchedule> parseDimFlag(const std::string& flag);

struct InputPlan {
  std::map<std::string, Tensor> given;      // from --inputs/--params/--input, by parameter name
  std::map<std::string, Value> scalars;     // from --arg NAME=VALUE
  std::vector<DimSchedule> dims;
  std::uint64_t seed = 0;
};

// Checks that every given name is a parameter of `fn` and every --dim target exists; errors
// list the valid names.
Status validatePlan(const Function& fn, const InputPlan& plan);

// Generated static-shape parameters (weights), drawn by the first buildArguments() of a run and
// reused by the later ones, by parameter index.
using DrawnOnce = std::map<std::size_t, Tensor>;

// Arguments for iteration `iteration` (dim schedules cycle), plus a label of the dynamic dims
// used ("batch=32 seq=10") for per-shape statistics. With `drawn_once`, static-shape parameters
// are taken from it (drawn into it the first time); their values do not depend on `iteration`
// either way, so a run gives the same arguments with or without it.
Expected<std::vector<Value>> buildArguments(const Function& fn, const InputPlan& plan, std::int64_t iteration,
                                            std::string* dims_label, DrawnOnce* drawn_once = nullptr);

// The fill of a generated input, a function of (dtype, shape, seed) alone, identical on every host:
// floating dtypes get approximately standard-normal values (Irwin-Hall sums of four uniforms,
// within +-3.5) in runs of a fixed per-process pool at places drawn from `seed` (not the `randn`
// op's values: this costs about a memcpy); integers get 0..7, bools 0/1. Never all zeros.
Expected<Tensor> randomTensor(DType dtype, const Shape& shape, std::uint64_t seed);

}  // namespace shapevm
