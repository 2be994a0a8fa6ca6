// SPDX-License-Identifier: Apache-2.0
// Argument construction for `shapevm run`: given tensors, scalar arguments and generated
// inputs from shape tokens with a cycling `--dim` schedule.
#include "tools/cli_inputs.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>

#include "support/fast_random.h"
#include "support/tunables.h"

namespace shapevm {
namespace {

bool parseInt64(std::string_view text, std::int64_t* out) {
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  return ec == std::errc() && end == text.data() + text.size() && !text.empty();
}

std::string dimLabel(const Function& fn, int id) {
  if (id >= 0 && static_cast<std::size_t>(id) < fn.dim_names.size() && !fn.dim_names[static_cast<std::size_t>(id)].empty()) {
    return fn.dim_names[static_cast<std::size_t>(id)];
  }
  return "?" + std::to_string(id);
}

// The schedule for axis `axis` of parameter `param` (PARAM.AXIS form), or for its dim id.
const DimSchedule* findSchedule(const Function& fn, const InputPlan& plan, const Param& param, int axis, int id) {
  const std::string by_axis = param.name + "." + std::to_string(axis);
  for (const DimSchedule& s : plan.dims) {
    if (s.target == by_axis) return &s;
  }
  if (id < 0) return nullptr;
  for (const DimSchedule& s : plan.dims) {
    if (s.target == dimLabel(fn, id) || s.target == "?" + std::to_string(id)) return &s;
  }
  return nullptr;
}

// Generated floating inputs are runs of up to kChunk consecutive values of one pool of kPoolSize +
// kChunk approximately-normal draws (made once per process from a fixed seed), each run from a
// place in the pool drawn from the tensor's seed: memcpy speed, so drawing a benchmark's inputs
// costs a small fraction of a compiled call, and no two rows alike.
constexpr std::int64_t kPoolSize = 1 << 16;
constexpr std::int64_t kChunk = 509;  // prime: run borders never line up with rows

const std::vector<float>& normalPool() {
  static const std::vector<float> pool = [] {
    std::vector<float> values(static_cast<std::size_t>(kPoolSize + kChunk));
    FastRandom random{0x5348415045564D31ULL};  // "SHAPEVM1"
    for (float& v : values) v = static_cast<float>(random.normal());
    return values;
  }();
  return pool;
}

std::int64_t defaultExtent(const DimToken& dim) {
  return dim.nearestAccepted(Tunables::get(Tunable::DefaultDynamicDim));
}

}  // namespace

Expected<DimSchedule> parseDimFlag(const std::string& flag) {
  auto equals = flag.find('=');
  if (equals == std::string::npos || equals == 0 || equals + 1 == flag.size()) {
    return makeError(ErrorCode::InvalidArgument, "--dim '{}': expected NAME=V[,V...] or PARAM.AXIS=V[,V...]", flag);
  }
  DimSchedule schedule;
  schedule.target = flag.substr(0, equals);
  std::string_view rest = std::string_view(flag).substr(equals + 1);
  while (true) {
    auto comma = rest.find(',');
    std::int64_t value = 0;
    std::string_view item = rest.substr(0, comma);
    if (!parseInt64(item, &value) || value < 0) {
      return makeError(ErrorCode::InvalidArgument, "--dim '{}': '{}' is not a non-negative integer", flag, item);
    }
    schedule.values.push_back(value);
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }
  return schedule;
}

Status validatePlan(const Function& fn, const InputPlan& plan) {
  std::string params;
  for (const Param& p : fn.params) params += (params.empty() ? "" : ", ") + p.name;
  for (const auto& [name, tensor] : plan.given) {
    int index = fn.paramIndex(name);
    if (index < 0) {
      return makeError(ErrorCode::UnknownName, "input '{}' matches no parameter of '{}' (parameters: {})", name, fn.name,
                       params);
    }
    if (fn.params[static_cast<std::size_t>(index)].kind != ValueKind::Tensor) {
      return makeError(ErrorCode::KindMismatch, "parameter '{}' of '{}' is a {}, give it with --arg {}=VALUE", name,
                       fn.name, valueKindName(fn.params[static_cast<std::size_t>(index)].kind), name);
    }
  }
  for (const auto& [name, value] : plan.scalars) {
    int index = fn.paramIndex(name);
    if (index < 0) {
      return makeError(ErrorCode::UnknownName, "--arg '{}' matches no parameter of '{}' (parameters: {})", name, fn.name, params);
    }
    if (const Param& p = fn.params[static_cast<std::size_t>(index)]; p.kind == ValueKind::Tensor) {
      return makeError(
          ErrorCode::KindMismatch,
          "--arg {}=...: parameter '{}' of '{}' is a tensor {}; give it with --input {}=FILE.npy (or leave it "
          "out for generated data)",
          name, name, fn.name, p.token.toString(), name);
    }
  }
  for (const DimSchedule& s : plan.dims) {
    bool found = false;
    auto dot = s.target.rfind('.');
    if (dot != std::string::npos) {
      int index = fn.paramIndex(s.target.substr(0, dot));
      std::int64_t axis = -1;
      if (index >= 0 && parseInt64(std::string_view(s.target).substr(dot + 1), &axis)) {
        const Param& p = fn.params[static_cast<std::size_t>(index)];
        if (axis < 0 || axis >= p.token.rank()) {
          return makeError(ErrorCode::IndexOutOfRange, "--dim {}: parameter '{}' {} has no axis {}", s.target, p.name,
                           p.token.toString(), axis);
        }
        if (p.token.dims[static_cast<std::size_t>(axis)].is_static) {
          return makeError(ErrorCode::InvalidArgument, "--dim {}: axis {} of '{}' is static ({}) in its token {}", s.target,
                           axis, p.name, p.token.dims[static_cast<std::size_t>(axis)].size, p.token.toString());
        }
        found = true;
      }
    }
    for (const Param& p : fn.params) {
      for (const DimToken& d : p.token.dims) {
        if (!d.is_static && d.id >= 0 && (dimLabel(fn, d.id) == s.target || "?" + std::to_string(d.id) == s.target)) found = true;
      }
    }
    if (!found) {
      std::string dims;
      for (const Param& p : fn.params) {
        for (std::size_t axis = 0; axis < p.token.dims.size(); ++axis) {
          const DimToken& d = p.token.dims[axis];
          if (d.is_static) continue;
          dims += (dims.empty() ? "" : ", ") + p.name + "." + std::to_string(axis);
          if (d.id >= 0) dims += " (" + dimLabel(fn, d.id) + ")";
        }
      }
      return makeError(ErrorCode::UnknownName, "--dim {}: no such dynamic dim in '{}' (dynamic dims: {})", s.target,
                       fn.name, dims.empty() ? "none" : dims);
    }
  }
  return Status::ok();
}

Expected<Tensor> randomTensor(DType dtype, const Shape& shape, std::uint64_t seed) {
  SVM_ASSIGN_OR_RETURN(Tensor t, Tensor::empty(dtype, shape));
  const std::int64_t n = t.numel();
  if (n == 0) return t;
  // Mixed first: seeds 0x9E3779B97F4A7C15 apart (buildArguments steps --seed by it) would
  // otherwise start the same splitmix64 stream one step apart.
  FastRandom random{FastRandom{seed}.next()};
  if (isFloating(dtype)) {
    const std::vector<float>& pool = normalPool();
    const auto chunks = [&](auto&& copy) {
      for (std::int64_t k = 0; k < n; k += kChunk) {
        copy(k, pool.data() + random.next() % kPoolSize, std::min<std::int64_t>(kChunk, n - k));
      }
    };
    if (dtype == DType::Float32) {
      float* data = t.data<float>();
      chunks([&](std::int64_t at, const float* from, std::int64_t count) {
        std::memcpy(data + at, from, static_cast<std::size_t>(count) * sizeof(float));
      });
    } else {
      chunks([&](std::int64_t at, const float* from, std::int64_t count) {
        for (std::int64_t j = 0; j < count; ++j) storeFromDouble(t.rawData(), dtype, at + j, from[j]);
      });
    }
  } else {
    for (std::int64_t i = 0; i < n; ++i) {
      const std::uint64_t bits = random.next();
      storeFromDouble(t.rawData(), dtype, i, static_cast<double>(dtype == DType::Bool ? bits & 1 : bits % 8));
    }
  }
  bool any_nonzero = false;
  for (std::int64_t i = 0; i < n && !any_nonzero; ++i) any_nonzero = loadAsDouble(t.rawData(), dtype, i) != 0.0;
  if (!any_nonzero) storeFromDouble(t.rawData(), dtype, n - 1, 1.0);  // never all zeros
  return t;
}

Expected<std::vector<Value>> buildArguments(const Function& fn, const InputPlan& plan, std::int64_t iteration,
                                            std::string* dims_label, DrawnOnce* drawn_once) {
  std::map<int, std::int64_t> bound;  // dynamic dim id -> extent chosen this iteration
  // Given tensors bind their dynamic dims first, so generated inputs agree with them.
  for (const Param& p : fn.params) {
    auto it = plan.given.find(p.name);
    if (it == plan.given.end() || p.token.any_rank || it->second.rank() != p.token.rank()) continue;
    for (std::size_t axis = 0; axis < p.token.dims.size(); ++axis) {
      const DimToken& d = p.token.dims[axis];
      if (!d.is_static && d.id >= 0) bound.emplace(d.id, it->second.dim(static_cast<int>(axis)));
    }
  }
  if (dims_label != nullptr) {
    dims_label->clear();
    for (const DimSchedule& s : plan.dims) {
      std::int64_t value = s.values[static_cast<std::size_t>(iteration) % s.values.size()];
      *dims_label += (dims_label->empty() ? "" : " ") + s.target + "=" + std::to_string(value);
    }
  }
  std::vector<Value> args;
  for (std::size_t index = 0; index < fn.params.size(); ++index) {
    const Param& p = fn.params[index];
    if (p.kind != ValueKind::Tensor) {
      auto it = plan.scalars.find(p.name);
      if (it == plan.scalars.end()) {
        return makeError(ErrorCode::InvalidArgument, "parameter '{}' ({}) of '{}' has no value: give --arg {}=VALUE",
                         p.name, valueKindName(p.kind), fn.name, p.name);
      }
      args.push_back(it->second);
      continue;
    }
    auto given = plan.given.find(p.name);
    if (given != plan.given.end()) {
      args.push_back(Value::fromTensor(given->second));
      continue;
    }
    if (p.token.any_rank) {
      return makeError(ErrorCode::InvalidArgument,
                       "parameter '{}' has token {} (any rank), so no input can be generated: give it with --input {}=FILE.npy",
                       p.name, p.token.toString(), p.name);
    }
    const bool fixed =
        std::all_of(p.token.dims.begin(), p.token.dims.end(), [](const DimToken& d) { return d.is_static; });
    if (fixed && drawn_once != nullptr) {
      if (auto it = drawn_once->find(index); it != drawn_once->end()) {
        args.push_back(Value::fromTensor(it->second));
        continue;
      }
    }
    Shape shape;
    for (std::size_t axis = 0; axis < p.token.dims.size(); ++axis) {
      const DimToken& d = p.token.dims[axis];
      std::int64_t extent = d.size;
      if (!d.is_static) {
        const DimSchedule* s = findSchedule(fn, plan, p, static_cast<int>(axis), d.id);
        if (s != nullptr) {
          extent = s->values[static_cast<std::size_t>(iteration) % s->values.size()];
        } else if (d.id >= 0 && bound.count(d.id)) {
          extent = bound[d.id];
        } else {
          extent = defaultExtent(d);
        }
        if (d.id >= 0) bound.emplace(d.id, extent);
      }
      shape.push_back(extent);
    }
    // A weight's seed leaves out the iteration: the same values every iteration, cached or not.
    const std::uint64_t draw = fixed ? 0 : static_cast<std::uint64_t>(iteration);
    const std::uint64_t seed = plan.seed * 0x9E3779B97F4A7C15ULL + draw * 1000003ULL + index;
    SVM_ASSIGN_OR_RETURN(Tensor t, randomTensor(p.token.dtype.value_or(DType::Float32), shape, seed));
    if (fixed && drawn_once != nullptr) drawn_once->emplace(index, t);
    args.push_back(Value::fromTensor(std::move(t)));
  }
  return args;
}

}  // namespace shapevm
