// SPDX-License-Identifier: Apache-2.0
// Creation kernels: zeros/ones/full for every dtype and shape form, arange against numpy's
// length rule computed here, randn against an independent mt19937_64 + Box-Muller reference
// (the documented, platform-independent algorithm), and the error cases.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "ops/registry.h"

namespace shapevm {
namespace {

constexpr DType kAllDTypes[] = {DType::Float32, DType::Float16, DType::BFloat16, DType::Float64,
                                DType::Int32,   DType::Int64,   DType::Bool};

Tensor call1(const std::string& op, std::vector<Value> inputs,
             std::vector<std::pair<std::string, AttrValue>> attrs = {}) {
  auto result = callOp(op, std::move(inputs), std::move(attrs));
  EXPECT_TRUE(result.hasValue()) << op << ": " << (result.hasValue() ? "" : result.status().toString());
  if (!result.hasValue()) return Tensor::scalar(0.0, DType::Float32);
  return (*result)[0].tensor();
}

Status callStatus(const std::string& op, std::vector<Value> inputs,
                  std::vector<std::pair<std::string, AttrValue>> attrs = {}) {
  auto result = callOp(op, std::move(inputs), std::move(attrs));
  return result.hasValue() ? Status::ok() : std::move(result).status();
}

Value shapeValue(std::vector<std::int64_t> dims) {
  return Value::fromInts(dims);
}

// The value `v` as stored in `dtype` (rounded for float16/bfloat16, truncated for ints).
double storedAs(double v, DType dtype) {
  Tensor t = Tensor::empty(dtype, Shape{}).value();
  storeFromDouble(t.rawData(), dtype, 0, v);
  return t.elementAsDouble(0);
}

TEST(Creation, ZerosOnesFullEveryDType) {
  std::mt19937 rng(17);
  std::uniform_real_distribution<double> real(-50.0, 50.0);
  const std::vector<std::vector<std::int64_t>> shapes = {{3, 4}, {2, 1, 5}, {}, {0, 3}, {7}};
  for (DType dtype : kAllDTypes) {
    for (const auto& dims : shapes) {
      const auto dtype_attr = std::vector<std::pair<std::string, AttrValue>>{{"dtype", AttrValue::ofDType(dtype)}};
      Tensor zeros = call1("zeros", {shapeValue(dims)}, dtype_attr);
      Tensor ones = call1("ones", {shapeValue(dims)}, dtype_attr);
      const double value = std::round(real(rng) * 4) / 4;  // quarters: exact in every float dtype
      Tensor full = call1("full", {shapeValue(dims), Value::fromFloat(value)}, dtype_attr);
      const Shape shape = Shape::from(dims).value();
      for (const Tensor* t : {&zeros, &ones, &full}) {
        ASSERT_EQ(t->dtype(), dtype);
        ASSERT_EQ(t->shape(), shape);
        ASSERT_TRUE(t->isContiguous());
      }
      double want_full = value;
      if (isInteger(dtype)) want_full = std::trunc(value);
      if (dtype == DType::Bool) want_full = value != 0 ? 1 : 0;
      for (std::int64_t i = 0; i < shape.numel(); ++i) {
        EXPECT_EQ(zeros.elementAsDouble(i), 0.0);
        EXPECT_EQ(ones.elementAsDouble(i), 1.0);
        EXPECT_EQ(full.elementAsDouble(i), want_full) << dtypeName(dtype) << " " << value;
      }
    }
  }
}

TEST(Creation, ShapeFormsAndDefaults) {
  // An int, a tuple and a 1-D int tensor all give a shape; the default dtype is float32.
  Tensor from_int = call1("zeros", {Value::fromInt(4)});
  EXPECT_EQ(from_int.shape(), (Shape{4}));
  EXPECT_EQ(from_int.dtype(), DType::Float32);
  Tensor dims = Tensor::empty(DType::Int64, Shape{2}).value();
  dims.data<std::int64_t>()[0] = 2;
  dims.data<std::int64_t>()[1] = 3;
  Tensor from_tensor = call1("ones", {Value::fromTensor(dims)});
  EXPECT_EQ(from_tensor.shape(), (Shape{2, 3}));
  // Large int64 fill values stay exact (no trip through double).
  const std::int64_t big = (std::int64_t{1} << 62) + 1;
  Tensor exact = call1("full", {shapeValue({3}), Value::fromInt(big)}, {{"dtype", AttrValue::ofDType(DType::Int64)}});
  for (int i = 0; i < 3; ++i) EXPECT_EQ(exact.data<std::int64_t>()[i], big);
  Tensor from_tensor_value = call1("full", {shapeValue({2}), Value::fromTensor(Tensor::scalar(2.5, DType::Float64))});
  EXPECT_EQ(from_tensor_value.elementAsDouble(1), 2.5);
  Tensor saturated =
      call1("full", {shapeValue({1}), Value::fromFloat(1e30)}, {{"dtype", AttrValue::ofDType(DType::Int32)}});
  EXPECT_EQ(saturated.elementAsDouble(0), 2147483647.0);
}

TEST(CreationErrors, NegativeExtents) {
  for (const char* op : {"zeros", "ones", "randn"}) {
    Status status = callStatus(op, {shapeValue({2, -1})});
    EXPECT_EQ(status.code(), ErrorCode::InvalidArgument) << op;
    EXPECT_NE(status.message().find("-1"), std::string::npos) << status.message();
  }
  EXPECT_EQ(callStatus("full", {shapeValue({-3}), Value::fromFloat(1.0)}).code(), ErrorCode::InvalidArgument);
}

// numpy: length = max(ceil((stop - start) / step), 0), element i = start + i * step.
std::vector<double> arangeReference(double start, double stop, double step) {
  std::vector<double> out;
  const double length = std::ceil((stop - start) / step);
  for (std::int64_t i = 0; i < static_cast<std::int64_t>(length); ++i)
    out.push_back(start + static_cast<double>(i) * step);
  return out;
}

TEST(Creation, ArangeIntegerForms) {
  std::mt19937 rng(23);
  std::uniform_int_distribution<int> bound(-30, 30), stride(-7, 7);
  for (int trial = 0; trial < 200; ++trial) {
    const int start = bound(rng), stop = bound(rng);
    int step = stride(rng);
    if (step == 0) step = 3;
    const DType dtype = trial % 3 == 0 ? DType::Int32 : trial % 3 == 1 ? DType::Int64 : DType::Float32;
    const auto attrs = std::vector<std::pair<std::string, AttrValue>>{{"dtype", AttrValue::ofDType(dtype)}};
    Tensor out = call1("arange", {Value::fromInt(start), Value::fromInt(stop), Value::fromInt(step)}, attrs);
    const std::vector<double> want = arangeReference(start, stop, step);
    ASSERT_EQ(out.dtype(), dtype);
    ASSERT_EQ(out.shape(), (Shape{static_cast<std::int64_t>(want.size())})) << start << " " << stop << " " << step;
    for (std::size_t i = 0; i < want.size(); ++i) EXPECT_EQ(out.elementAsDouble(static_cast<std::int64_t>(i)), want[i]);
    // arange(stop) and arange(start, stop).
    Tensor upto = call1("arange", {Value::fromInt(stop)}, attrs);
    const std::vector<double> want_upto = arangeReference(0, stop, 1);
    ASSERT_EQ(upto.numel(), static_cast<std::int64_t>(want_upto.size()));
    for (std::size_t i = 0; i < want_upto.size(); ++i)
      EXPECT_EQ(upto.elementAsDouble(static_cast<std::int64_t>(i)), want_upto[i]);
    Tensor pair = call1("arange", {Value::fromInt(start), Value::fromInt(stop)}, attrs);
    EXPECT_EQ(pair.numel(), static_cast<std::int64_t>(arangeReference(start, stop, 1).size()));
  }
  Tensor defaults = call1("arange", {Value::fromInt(5)});
  EXPECT_EQ(defaults.dtype(), DType::Int64);
  EXPECT_EQ(defaults.elementAsDouble(4), 4.0);
  // Near the int64 limits the length and values stay exact.
  const std::int64_t top = std::numeric_limits<std::int64_t>::max();
  Tensor edge = call1("arange", {Value::fromInt(top - 5), Value::fromInt(top), Value::fromInt(2)});
  ASSERT_EQ(edge.numel(), 3);
  EXPECT_EQ(edge.data<std::int64_t>()[2], top - 1);
}

TEST(Creation, ArangeFloatSteps) {
  std::mt19937 rng(29);
  std::uniform_real_distribution<double> bound(-10, 10), stride(0.1, 2.0);
  for (int trial = 0; trial < 100; ++trial) {
    const double start = bound(rng), stop = bound(rng);
    const double step = trial % 2 ? stride(rng) : -stride(rng);
    for (DType dtype : {DType::Float32, DType::Float64, DType::Float16}) {
      Tensor out = call1("arange", {Value::fromFloat(start), Value::fromFloat(stop), Value::fromFloat(step)},
                         {{"dtype", AttrValue::ofDType(dtype)}});
      const std::vector<double> want = arangeReference(start, stop, step);
      ASSERT_EQ(out.numel(), static_cast<std::int64_t>(want.size()));
      for (std::size_t i = 0; i < want.size(); ++i) {
        EXPECT_EQ(out.elementAsDouble(static_cast<std::int64_t>(i)), storedAs(want[i], dtype));
      }
    }
  }
}

TEST(CreationErrors, ArangeStepZeroAndNonFinite) {
  Status zero = callStatus("arange", {Value::fromInt(0), Value::fromInt(5), Value::fromInt(0)});
  EXPECT_EQ(zero.code(), ErrorCode::InvalidArgument);
  EXPECT_NE(zero.message().find("step"), std::string::npos) << zero.message();
  EXPECT_EQ(callStatus("arange", {Value::fromFloat(0.0), Value::fromFloat(INFINITY)}).code(),
            ErrorCode::InvalidArgument);
  EXPECT_EQ(callStatus("arange", {Value::fromFloat(0.0), Value::fromFloat(1e300), Value::fromFloat(1e-300)}).code(),
            ErrorCode::OutOfMemory);
}

// Independent reference: the standard's mt19937_64 and the Box-Muller transform documented in
// creation_ops.cc (pairs of cos / sin samples).
std::vector<double> randnReference(std::uint64_t seed, std::int64_t count) {
  std::mt19937_64 engine(seed);
  std::vector<double> out;
  while (static_cast<std::int64_t>(out.size()) < count) {
    const double u1 = (static_cast<double>(engine() >> 11) + 1.0) / 9007199254740992.0;
    const double u2 = static_cast<double>(engine() >> 11) / 9007199254740992.0;
    const double r = std::sqrt(-2.0 * std::log(u1));
    out.push_back(r * std::cos(6.283185307179586476925 * u2));
    out.push_back(r * std::sin(6.283185307179586476925 * u2));
  }
  out.resize(static_cast<std::size_t>(count));
  return out;
}

TEST(Creation, RandnIsSeededAndMatchesTheDocumentedAlgorithm) {
  for (std::int64_t seed : {0, 1, 42, -5}) {
    for (DType dtype : {DType::Float64, DType::Float32, DType::Float16, DType::BFloat16}) {
      Tensor out = call1("randn", {shapeValue({3, 5})},
                         {{"seed", AttrValue::ofInt(seed)}, {"dtype", AttrValue::ofDType(dtype)}});
      ASSERT_EQ(out.dtype(), dtype);
      ASSERT_EQ(out.shape(), (Shape{3, 5}));
      const std::vector<double> want = randnReference(static_cast<std::uint64_t>(seed), 15);
      for (std::int64_t i = 0; i < 15; ++i) {
        EXPECT_NEAR(out.elementAsDouble(i), storedAs(want[static_cast<std::size_t>(i)], dtype), 1e-12)
            << seed << " " << i;
      }
      Tensor again = call1("randn", {shapeValue({3, 5})},
                           {{"seed", AttrValue::ofInt(seed)}, {"dtype", AttrValue::ofDType(dtype)}});
      for (std::int64_t i = 0; i < 15; ++i) EXPECT_EQ(again.elementAsDouble(i), out.elementAsDouble(i));
    }
  }
  Tensor a = call1("randn", {shapeValue({8})}, {{"seed", AttrValue::ofInt(1)}});
  Tensor b = call1("randn", {shapeValue({8})}, {{"seed", AttrValue::ofInt(2)}});
  int differing = 0;
  for (std::int64_t i = 0; i < 8; ++i) differing += a.elementAsDouble(i) != b.elementAsDouble(i);
  EXPECT_EQ(differing, 8);
}

TEST(Creation, RandnMoments) {
  Tensor out = call1("randn", {shapeValue({200, 100})},
                     {{"seed", AttrValue::ofInt(7)}, {"dtype", AttrValue::ofDType(DType::Float64)}});
  double sum = 0, sum_squares = 0;
  for (std::int64_t i = 0; i < out.numel(); ++i) {
    const double v = out.elementAsDouble(i);
    sum += v;
    sum_squares += v * v;
  }
  const double n = static_cast<double>(out.numel());
  EXPECT_NEAR(sum / n, 0.0, 0.03);
  EXPECT_NEAR(sum_squares / n, 1.0, 0.04);
}

TEST(CreationErrors, RandnNeedsFloatDType) {
  Status status = callStatus("randn", {shapeValue({2})}, {{"dtype", AttrValue::ofDType(DType::Int32)}});
  EXPECT_EQ(status.code(), ErrorCode::DTypeMismatch);
}

}  // namespace
}  // namespace shapevm
