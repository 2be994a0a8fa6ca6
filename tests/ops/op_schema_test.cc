// SPDX-License-Identifier: Apache-2.0
// The op table (ops.def) against the code it describes: every op has a reference kernel, a shape
// function, a dtype rule and a decided JIT status whose words fit its class; and every shape
// function, run on symbolic versions of fresh random inputs, agrees with the shape the reference
// kernel actually produces (exactly, when every input dim is static), and every dtype rule with
// the kernel's output dtype. The per-op input generator below is a switch over OpId without a
// default, so a new op does not compile until it has a case here.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <random>

#include <fmt/format.h>

#include "op_test_util.h"
#include "ops/registry.h"

namespace shapevm::testing {
namespace {

struct Case {
  std::vector<Value> inputs;
  Attrs attrs;
};

constexpr DType kAllDTypes[] = {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16,
                                DType::Int64,   DType::Int32,   DType::Bool};
constexpr DType kFloatDTypes[] = {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16};

int pick(std::mt19937& rng, int lo, int hi) {
  return std::uniform_int_distribution<int>(lo, hi)(rng);
}
bool coin(std::mt19937& rng) {
  return pick(rng, 0, 1) == 1;
}
template <typename T, std::size_t N>
T pickFrom(std::mt19937& rng, const T (&items)[N]) {
  return items[static_cast<std::size_t>(pick(rng, 0, static_cast<int>(N) - 1))];
}

Shape randomShape(std::mt19937& rng, int min_rank = 0, int max_rank = 4) {
  Shape s;
  s.resize(pick(rng, min_rank, max_rank));
  for (int d = 0; d < s.rank(); ++d) s[d] = pick(rng, 1, 5);
  return s;
}

Value tensorOf(DType dtype, const Shape& shape, std::mt19937& rng) {
  return Value::fromTensor(randomTensor(dtype, shape, rng));
}

Value intsOf(const std::vector<std::int64_t>& values) {
  return Value::fromInts(values);
}

std::vector<std::int64_t> dimsOf(const Shape& s) {
  std::vector<std::int64_t> out;
  for (int d = 0; d < s.rank(); ++d) out.push_back(s[d]);
  return out;
}

// A shape that broadcasts to `base`: a suffix of it with some dims replaced by 1.
Shape broadcastable(const Shape& base, std::mt19937& rng) {
  const int rank = pick(rng, 0, base.rank());
  Shape s;
  s.resize(rank);
  for (int d = 0; d < rank; ++d) s[d] = coin(rng) && pick(rng, 0, 2) == 0 ? 1 : base[base.rank() - rank + d];
  return s;
}

DType dataDType(const OpSchema& schema, std::size_t input, std::mt19937& rng) {
  const InputDomain domain = schema.inputs[std::min(input, schema.inputs.size() - 1)].domain;
  if (domain == InputDomain::Bool) return DType::Bool;
  if (schema.cls == OpClass::Normalization) return pickFrom(rng, kFloatDTypes);
  return pickFrom(rng, kAllDTypes);
}

std::vector<std::int64_t> randomAxes(int rank, std::mt19937& rng) {
  std::vector<std::int64_t> axes;
  for (int d = 0; d < rank; ++d) {
    if (coin(rng)) axes.push_back(coin(rng) ? d : d - rank);
  }
  return axes;
}

// Random valid inputs and attributes for `op`. Exhaustive over OpId: a new op needs a case.
Case makeCase(const OpSchema& schema, std::mt19937& rng) {
  Case c;
  const DType dt = dataDType(schema, 0, rng);
  switch (schema.id) {
    case OpId::MatMul: {
      const int m = pick(rng, 1, 4), k = pick(rng, 1, 4), n = pick(rng, 1, 4);
      Shape batch = randomShape(rng, 0, 2);
      Shape a = broadcastable(batch, rng), b = broadcastable(batch, rng);
      a.push_back(m), a.push_back(k);
      b.push_back(k), b.push_back(n);
      if (pick(rng, 0, 3) == 0) a = Shape{k};
      if (pick(rng, 0, 3) == 0) b = Shape{k};
      const DType fdt = pickFrom(rng, kFloatDTypes);
      c.inputs = {tensorOf(fdt, a, rng), tensorOf(coin(rng) ? fdt : pickFrom(rng, kFloatDTypes), b, rng)};
      break;
    }
    case OpId::Add:
    case OpId::Sub:
    case OpId::Mul:
    case OpId::Div:
    case OpId::Pow:
    case OpId::Maximum:
    case OpId::Minimum:
    case OpId::Equal:
    case OpId::NotEqual:
    case OpId::Less:
    case OpId::LessEqual:
    case OpId::Greater:
    case OpId::GreaterEqual:
    case OpId::LogicalAnd:
    case OpId::LogicalOr:
    case OpId::Where:
    case OpId::AddN: {
      const Shape base = randomShape(rng);
      const int n = schema.id == OpId::Where ? 3 : schema.id == OpId::AddN ? pick(rng, 1, 4) : 2;
      for (int i = 0; i < n; ++i) {
        const std::size_t spec = static_cast<std::size_t>(i);
        const Shape s = i == 0 ? base : broadcastable(base, rng);
        if (i > 0 && schema.id != OpId::AddN && pick(rng, 0, 5) == 0) {
          c.inputs.push_back(coin(rng) ? Value::fromInt(pick(rng, 1, 3)) : Value::fromFloat(1.5));
        } else {
          c.inputs.push_back(tensorOf(i == 0 ? dt : dataDType(schema, spec, rng), s, rng));
        }
      }
      if (pick(rng, 0, 1) == 0) std::rotate(c.inputs.begin(), c.inputs.begin() + 1, c.inputs.end());
      if (schema.id == OpId::Where && !c.inputs[0].isTensor()) std::swap(c.inputs[0], c.inputs[1]);
      break;
    }
    case OpId::Neg:
    case OpId::Abs:
    case OpId::Exp:
    case OpId::Log:
    case OpId::Sqrt:
    case OpId::Rsqrt:
    case OpId::Sigmoid:
    case OpId::Tanh:
    case OpId::Relu:
    case OpId::Gelu:
    case OpId::Erf:
    case OpId::Silu:
    case OpId::LogicalNot:
    case OpId::Identity:
    case OpId::Contiguous: c.inputs = {tensorOf(dt, randomShape(rng), rng)}; break;
    case OpId::Cast:
      c.inputs = {tensorOf(dt, randomShape(rng), rng)};
      c.attrs = {{"dtype", AttrValue::ofDType(pickFrom(rng, kAllDTypes))}};
      break;
    case OpId::Reshape: {
      const Shape s = randomShape(rng, 1);
      const std::int64_t total = s.numel();
      std::vector<std::int64_t> target;
      for (std::int64_t f = 1; f <= total; ++f) {
        if (total % f == 0 && coin(rng)) {
          target = {f, total / f};
          break;
        }
      }
      if (target.empty()) target = {total};
      if (coin(rng)) target[static_cast<std::size_t>(pick(rng, 0, static_cast<int>(target.size()) - 1))] = -1;
      c.inputs = {tensorOf(dt, s, rng), intsOf(target)};
      break;
    }
    case OpId::Transpose: {
      const Shape s = randomShape(rng);
      std::vector<std::int64_t> perm(static_cast<std::size_t>(s.rank()));
      std::iota(perm.begin(), perm.end(), 0);
      std::shuffle(perm.begin(), perm.end(), rng);
      c.inputs = {tensorOf(dt, s, rng)};
      if (coin(rng)) c.attrs = {{"perm", AttrValue::ofInts(perm)}};
      break;
    }
    case OpId::Squeeze: {
      Shape s = randomShape(rng);
      std::vector<std::int64_t> axes;
      for (int d = 0; d < s.rank(); ++d) {
        if (pick(rng, 0, 2) == 0) s[d] = 1;
        if (s[d] == 1 && coin(rng)) axes.push_back(d);
      }
      c.inputs = {tensorOf(dt, s, rng)};
      if (!axes.empty()) c.attrs = {{"axes", AttrValue::ofInts(axes)}};
      break;
    }
    case OpId::Unsqueeze: {
      const Shape s = randomShape(rng, 0, 3);
      const int added = pick(rng, 1, 2), out_rank = s.rank() + added;
      std::vector<std::int64_t> all(static_cast<std::size_t>(out_rank));
      std::iota(all.begin(), all.end(), 0);
      std::shuffle(all.begin(), all.end(), rng);
      all.resize(static_cast<std::size_t>(added));
      c.inputs = {tensorOf(dt, s, rng)};
      c.attrs = {{"axes", AttrValue::ofInts(all)}};
      break;
    }
    case OpId::Split: {
      const Shape s = randomShape(rng, 1);
      const int axis = pick(rng, 0, s.rank() - 1);
      c.inputs = {tensorOf(dt, s, rng)};
      c.attrs = {{"axis", AttrValue::ofInt(coin(rng) ? axis : axis - s.rank())}};
      if (coin(rng)) {
        c.attrs.emplace_back("sections", AttrValue::ofInt(s[axis]));
      } else {
        std::vector<std::int64_t> sizes;
        for (std::int64_t left = s[axis]; left > 0;)
          sizes.push_back(pick(rng, 1, static_cast<int>(left))), left -= sizes.back();
        c.attrs.emplace_back("sizes", AttrValue::ofInts(sizes));
      }
      break;
    }
    case OpId::Concat:
    case OpId::Stack: {
      const Shape s = randomShape(rng, 1);
      const int axis = pick(rng, 0, s.rank() - 1);
      for (int i = pick(rng, 1, 3); i > 0; --i) {
        Shape part = s;
        if (schema.id == OpId::Concat) part[axis] = pick(rng, 1, 4);
        c.inputs.push_back(tensorOf(dt, part, rng));
      }
      c.attrs = {{"axis", AttrValue::ofInt(schema.id == OpId::Stack ? pick(rng, 0, s.rank()) : axis)}};
      break;
    }
    case OpId::Slice: {
      const Shape s = randomShape(rng, 1);
      const int axis = pick(rng, 0, s.rank() - 1);
      c.inputs = {tensorOf(dt, s, rng), intsOf({pick(rng, 0, 1)}), intsOf({s[axis]}), intsOf({pick(rng, 1, 2)})};
      c.attrs = {{"axes", AttrValue::ofInts({axis})}};
      break;
    }
    case OpId::Gather: {
      const Shape s = randomShape(rng, 1);
      const int axis = pick(rng, 0, s.rank() - 1);
      c.inputs = {tensorOf(dt, s, rng)};
      if (coin(rng)) {
        c.inputs.push_back(Value::fromInt(pick(rng, 0, static_cast<int>(s[axis]) - 1)));
      } else {
        Tensor idx = Tensor::empty(DType::Int64, randomShape(rng, 0, 2)).value();
        for (std::int64_t i = 0; i < idx.numel(); ++i)
          idx.data<std::int64_t>()[i] = pick(rng, 0, static_cast<int>(s[axis]) - 1);
        c.inputs.push_back(Value::fromTensor(idx));
      }
      c.attrs = {{"axis", AttrValue::ofInt(axis)}};
      break;
    }
    case OpId::BroadcastTo: {
      const Shape target = randomShape(rng);
      c.inputs = {tensorOf(dt, broadcastable(target, rng), rng), intsOf(dimsOf(target))};
      break;
    }
    case OpId::Pad: {
      const Shape s = randomShape(rng, 1);
      std::vector<std::int64_t> pads;
      for (int d = 0; d < 2 * s.rank(); ++d) pads.push_back(pick(rng, 0, 2));
      c.inputs = {tensorOf(dt, s, rng)};
      c.attrs = {{"pads", AttrValue::ofInts(pads)}, {"mode", AttrValue::ofInt(pick(rng, 0, 2))}};
      break;
    }
    case OpId::Sum:
    case OpId::Mean:
    case OpId::Max:
    case OpId::Min: {
      const Shape s = randomShape(rng);
      c.inputs = {tensorOf(dt, s, rng)};
      c.attrs = {{"axes", AttrValue::ofInts(randomAxes(s.rank(), rng))}, {"keepdims", AttrValue::ofBool(coin(rng))}};
      break;
    }
    case OpId::ArgMax: {
      const Shape s = randomShape(rng, 1);
      c.inputs = {tensorOf(dt, s, rng)};
      c.attrs = {{"axis", AttrValue::ofInt(pick(rng, -s.rank(), s.rank() - 1))},
                 {"keepdims", AttrValue::ofBool(coin(rng))}};
      break;
    }
    case OpId::Softmax:
    case OpId::LogSoftmax:
    case OpId::LayerNorm: {
      const Shape s = randomShape(rng, 1);
      const int axis = pick(rng, 0, s.rank() - 1);
      c.inputs = {tensorOf(dt, s, rng)};
      c.attrs = {{"axis", AttrValue::ofInt(coin(rng) ? axis : axis - s.rank())}};
      if (schema.id == OpId::LayerNorm && coin(rng)) {
        Shape tail;
        tail.resize(s.rank() - axis);
        for (int d = axis; d < s.rank(); ++d) tail[d - axis] = s[d];
        c.inputs.push_back(tensorOf(dt, tail, rng));
        c.inputs.push_back(tensorOf(dt, tail, rng));
      }
      break;
    }
    case OpId::Conv:
    case OpId::ConvTranspose: {
      const DType ft = pickFrom(rng, kFloatDTypes);
      const int dims = pick(rng, 1, 3), groups = pick(rng, 1, 2);
      const std::int64_t channels = groups * pick(rng, 1, 2), out_channels = groups * pick(rng, 1, 2);
      Shape x{pick(rng, 1, 2), channels}, w;
      if (schema.id == OpId::Conv) w = Shape{out_channels, channels / groups};
      else w = Shape{channels, out_channels / groups};
      std::vector<std::int64_t> strides, pads, dilations;
      for (int d = 0; d < dims; ++d) {
        const int k = pick(rng, 1, 3), dil = pick(rng, 1, 2), pad = pick(rng, 0, 1);
        w.push_back(k);
        x.push_back(pick(rng, dil * (k - 1) + 1, 6));
        strides.push_back(pick(rng, 1, 2));
        dilations.push_back(dil);
        pads.push_back(pad);
        pads.push_back(pick(rng, 0, 1));
      }
      c.inputs = {tensorOf(ft, x, rng), tensorOf(ft, w, rng)};
      if (coin(rng)) c.inputs.push_back(tensorOf(ft, Shape{out_channels}, rng));
      c.attrs = {{"strides", AttrValue::ofInts(strides)},
                 {"dilations", AttrValue::ofInts(dilations)},
                 {"groups", AttrValue::ofInt(groups)}};
      const int auto_pad = pick(rng, 0, 3);
      if (auto_pad == 0) c.attrs.push_back({"pads", AttrValue::ofInts(pads)});
      else c.attrs.push_back({"auto_pad", AttrValue::ofInt(auto_pad)});
      break;
    }
    case OpId::MaxPool:
    case OpId::AvgPool: {
      const int dims = pick(rng, 1, 3);
      Shape x{pick(rng, 1, 2), pick(rng, 1, 3)};
      std::vector<std::int64_t> kernel, strides, pads;
      for (int d = 0; d < dims; ++d) {
        const int k = pick(rng, 1, 3);
        kernel.push_back(k);
        x.push_back(pick(rng, k, 6));
        strides.push_back(pick(rng, 1, 2));
        pads.push_back(pick(rng, 0, k / 2));
      }
      c.inputs = {tensorOf(pickFrom(rng, kFloatDTypes), x, rng)};
      c.attrs = {{"kernel", AttrValue::ofInts(kernel)},
                 {"strides", AttrValue::ofInts(strides)},
                 {"pads", AttrValue::ofInts(pads)},
                 {"ceil_mode", AttrValue::ofBool(coin(rng))}};
      if (coin(rng)) c.attrs.push_back({"auto_pad", AttrValue::ofInt(pick(rng, 1, 3))});
      break;
    }
    case OpId::GlobalAvgPool:
    case OpId::GlobalMaxPool: c.inputs = {tensorOf(pickFrom(rng, kFloatDTypes), randomShape(rng, 3, 5), rng)}; break;
    case OpId::BatchNorm:
    case OpId::InstanceNorm:
    case OpId::GroupNorm: {
      Shape x = randomShape(rng, 3, 5);
      const int groups = schema.id == OpId::GroupNorm ? pick(rng, 1, 2) : 1;
      x[1] *= groups;
      c.inputs = {tensorOf(dt, x, rng)};
      const int params = schema.id == OpId::BatchNorm ? 4 : 2;
      for (int k = 0; k < params; ++k) {
        Tensor t = randomTensor(dt, Shape{x[1]}, rng);
        if (k == 3) {  // batch_norm's variance > 0
          for (std::int64_t i = 0; i < t.numel(); ++i)
            storeFromDouble(t.rawData(), dt, i, 0.5 + 0.25 * static_cast<double>(i));
        }
        c.inputs.push_back(Value::fromTensor(t));
      }
      if (schema.id == OpId::GroupNorm) c.attrs = {{"groups", AttrValue::ofInt(groups)}};
      break;
    }
    case OpId::Resize: {
      Shape x = randomShape(rng, 3, 5);
      c.inputs = {tensorOf(pickFrom(rng, kFloatDTypes), x, rng)};
      std::vector<std::int64_t> sizes;
      for (int d = 2; d < x.rank(); ++d) sizes.push_back(pick(rng, 1, 7));
      c.inputs.push_back(intsOf(sizes));
      c.attrs = {{"mode", AttrValue::ofInt(pick(rng, 0, 2))},
                 {"coordinate_mode", AttrValue::ofInt(pick(rng, 0, 4))},
                 {"nearest_mode", AttrValue::ofInt(pick(rng, 0, 3))}};
      break;
    }
    case OpId::DepthToSpace:
    case OpId::SpaceToDepth: {
      const int b = pick(rng, 1, 3);
      Shape x{pick(rng, 1, 2), pick(rng, 1, 3), pick(rng, 1, 3), pick(rng, 1, 3)};
      if (schema.id == OpId::DepthToSpace) x[1] *= b * b;
      else x[2] *= b, x[3] *= b;
      c.inputs = {tensorOf(pickFrom(rng, kAllDTypes), x, rng)};
      c.attrs = {{"blocksize", AttrValue::ofInt(b)}};
      if (schema.id == OpId::DepthToSpace) c.attrs.push_back({"mode", AttrValue::ofInt(pick(rng, 0, 1))});
      break;
    }
    case OpId::Zeros:
    case OpId::Ones:
    case OpId::Randn:
      c.inputs = {intsOf(dimsOf(randomShape(rng)))};
      c.attrs = {{"dtype", AttrValue::ofDType(schema.id == OpId::Randn ? pickFrom(rng, kFloatDTypes)
                                                                       : pickFrom(rng, kAllDTypes))}};
      break;
    case OpId::Full:
      c.inputs = {intsOf(dimsOf(randomShape(rng))), Value::fromInt(pick(rng, 0, 9))};
      c.attrs = {{"dtype", AttrValue::ofDType(pickFrom(rng, kAllDTypes))}};
      break;
    case OpId::Arange:
      c.inputs = {Value::fromInt(pick(rng, -3, 3)), Value::fromInt(pick(rng, 4, 12)), Value::fromInt(pick(rng, 1, 3))};
      break;
    case OpId::kCount: ADD_FAILURE() << "kCount is not an op"; break;
  }
  return c;
}

// Symbolic views of the inputs: each tensor dim static or dynamic (ids shared by equal extents,
// sometimes anonymous) unless `all_static`; ints inputs as static elements.
struct Symbolic {
  std::vector<SymInput> inputs;
  std::map<std::int32_t, std::int64_t> extent_of_id;
};

Symbolic symbolize(const std::vector<Value>& inputs, bool all_static, std::mt19937& rng) {
  Symbolic out;
  std::map<std::int64_t, std::int32_t> id_of_extent;
  for (const Value& v : inputs) {
    if (v.isTensor()) {
      SymShape shape;
      for (int d = 0; d < v.tensor().rank(); ++d) {
        const std::int64_t extent = v.tensor().dim(d);
        if (all_static || pick(rng, 0, 2) == 0) {
          shape.dims.push_back(SymDim::fixed(extent));
        } else if (pick(rng, 0, 3) == 0) {
          shape.dims.push_back(SymDim::dynamic(-1));
        } else {
          auto [it, added] = id_of_extent.emplace(extent, static_cast<std::int32_t>(id_of_extent.size()));
          out.extent_of_id[it->second] = extent;
          shape.dims.push_back(SymDim::dynamic(it->second));
        }
      }
      out.inputs.push_back(SymInput::tensor(shape));
    } else if (v.isInt() || v.isBool()) {
      out.inputs.push_back(SymInput::of(SymInput::Kind::IntScalar));
    } else if (v.isFloat()) {
      out.inputs.push_back(SymInput::of(SymInput::Kind::Scalar));
    } else if (v.isTuple()) {
      SymShape elements;
      for (const Value& item : v.tuple()) elements.dims.push_back(SymDim::fixed(item.asInt()));
      out.inputs.push_back(SymInput::ints(elements));
    } else {
      out.inputs.push_back(SymInput::of(SymInput::Kind::Other));
    }
  }
  return out;
}

TEST(OpSchema, EveryOpHasAKernelAShapeFunctionAndADecidedJitStatus) {
  const OpRegistry& registry = OpRegistry::global();
  ASSERT_EQ(registry.schemas().size(), static_cast<std::size_t>(kNumOps));
  for (const OpSchema& schema : registry.schemas()) {
    SCOPED_TRACE(std::string(schema.name));
    EXPECT_EQ(registry.find(schema.name), &schema);
    EXPECT_FALSE(schema.ident.empty());
    EXPECT_FALSE(schema.meaning.empty());
    ASSERT_FALSE(registry.entries(schema.id).empty()) << "no reference kernel registered";
    EXPECT_TRUE(registry.entries(schema.id)[0].pattern.specificity() == 0)
        << "the first entry must be the generic kernel";
    EXPECT_NE(schema.shape_fn, nullptr);
    EXPECT_TRUE(schema.shape_fn_name.starts_with("shape"));
    // The jit column's words fit the class.
    const JitSupport& jit = schema.jit;
    const bool elementwise_class = schema.cls == OpClass::Binary || schema.cls == OpClass::Compare ||
                                   schema.cls == OpClass::Unary || schema.cls == OpClass::Select ||
                                   schema.cls == OpClass::Cast || schema.cls == OpClass::Nary;
    if (jit.elementwise) {
      EXPECT_TRUE(elementwise_class);
    }
    if (jit.fuse) {
      EXPECT_TRUE(jit.elementwise && (schema.cls == OpClass::Binary || schema.cls == OpClass::Unary));
    }
    if (jit.matmul) {
      EXPECT_EQ(schema.cls, OpClass::Contraction);
    }
    if (jit.view) {
      EXPECT_EQ(schema.cls, OpClass::View);
    }
    if (jit.fused_reduce) {
      EXPECT_TRUE(jit.reduce && schema.cls == OpClass::Reduction);
    }
    if (jit.norm) {
      EXPECT_EQ(schema.cls, OpClass::Normalization);
    }
    if (jit.conv) {  // conv, and the pools' window loop
      EXPECT_TRUE(schema.cls == OpClass::Contraction || schema.id == OpId::MaxPool || schema.id == OpId::AvgPool);
    }
    if (jit.reduce) {
      EXPECT_TRUE(schema.cls == OpClass::Reduction || schema.cls == OpClass::Normalization);
    }
    // Creation ops have no tensor input; every other class takes one first.
    const bool tensor_first = !schema.inputs.empty() && schema.inputs[0].kind == InputKind::Tensor;
    EXPECT_EQ(schema.cls != OpClass::Creation, tensor_first);
    if (schema.dtype_rule == DTypeRule::Attr) {
      EXPECT_GE(schema.attrIndex("dtype"), 0);
    }
  }
}

TEST(OpSchema, ShapeFunctionsAndDTypeRulesMatchTheReferenceKernels) {
  std::mt19937 rng(20261201);
  for (const OpSchema& schema : OpRegistry::global().schemas()) {
    SCOPED_TRACE(std::string(schema.name));
    const bool derives = schema.shape_fn != &shapeUnknown;
    int ran = 0;
    for (int trial = 0; trial < 120 && ran < 40; ++trial) {
      Case c = makeCase(schema, rng);
      auto outputs = callOp(schema.name, c.inputs, c.attrs);
      if (!outputs) continue;  // e.g. integer division by zero, an op rejecting a dtype
      ++ran;
      auto attrs = resolveAttrs(schema, c.attrs);
      ASSERT_TRUE(attrs.hasValue());
      const bool all_static = trial % 3 == 0;
      const Symbolic sym = symbolize(c.inputs, all_static, rng);
      const int n = static_cast<int>(outputs->size());
      for (int o = 0; o < n; ++o) {
        const Tensor& actual = (*outputs)[static_cast<std::size_t>(o)].tensor();
        const SymShape inferred = inferShape(schema, sym.inputs, *attrs, o, n);
        SCOPED_TRACE(fmt::format("output {}: inferred {}, actual {}", o, inferred.toString(), actual.describe()));
        if (all_static && derives) {
          ASSERT_TRUE(inferred.rank_known) << "static inputs must give a known shape";
        }
        if (!inferred.rank_known) continue;
        ASSERT_EQ(inferred.rank(), actual.rank());
        for (int d = 0; d < actual.rank(); ++d) {
          const SymDim& dim = inferred.dims[static_cast<std::size_t>(d)];
          if (dim.is_static) {
            EXPECT_EQ(dim.size, actual.dim(d)) << "axis " << d;
          } else if (dim.id >= 0) {
            EXPECT_EQ(sym.extent_of_id.at(dim.id), actual.dim(d)) << "axis " << d << " is ?" << dim.id;
          }
          if (all_static) {
            EXPECT_TRUE(dim.is_static) << "axis " << d << " of static inputs";
          }
        }
      }
      // dtype: all data inputs tensors (Python scalars are weak and follow their own rule).
      std::vector<std::optional<DType>> dtypes;
      bool scalar_data = false;
      for (std::size_t i = 0; i < c.inputs.size(); ++i) {
        const InputSpec& spec = schema.inputs[std::min(i, schema.inputs.size() - 1)];
        if (c.inputs[i].isTensor()) dtypes.push_back(c.inputs[i].tensor().dtype());
        else dtypes.push_back(std::nullopt), scalar_data = scalar_data || spec.kind == InputKind::Tensor;
      }
      if (scalar_data || schema.id == OpId::Gather) dtypes.resize(1);  // gather's indices do not count
      if (!scalar_data) {
        EXPECT_EQ(resultDType(schema, dtypes, *attrs), (*outputs)[0].tensor().dtype());
      }
    }
    EXPECT_GE(ran, 20) << "too few random cases the reference kernel accepted";
  }
}

// broadcastShapes on hand-picked symbolic cases (ids survive against 1, different ids do not).
TEST(OpSchema, BroadcastKeepsDimIdsItCanProve) {
  SymShape a{true, {SymDim::dynamic(0), SymDim::fixed(1), SymDim::dynamic(2)}};
  SymShape b{true, {SymDim::fixed(4), SymDim::dynamic(3)}};
  auto out = broadcastShapes(a, b);
  ASSERT_TRUE(out.has_value());
  EXPECT_EQ(out->toString(), "[?0,4,?]");
  EXPECT_FALSE(broadcastShapes(SymShape{true, {SymDim::fixed(2)}}, SymShape{true, {SymDim::fixed(3)}}).has_value());
  EXPECT_FALSE(broadcastShapes(SymShape::any(), a).has_value());
}

}  // namespace
}  // namespace shapevm::testing
