// SPDX-License-Identifier: Apache-2.0
// Elementwise kernels against naive double-precision references written here: random inputs of
// every dtype, broadcasting, transposed / strided / offset views, scalars, and the error cases
// (broadcast mismatch, integer division by zero, non-bool logical operands).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "ops/registry.h"

namespace shapevm {
namespace {

constexpr DType kAllDTypes[] = {DType::Float32, DType::Float16, DType::BFloat16, DType::Float64,
                                DType::Int32,   DType::Int64,   DType::Bool};
constexpr DType kFloatDTypes[] = {DType::Float32, DType::Float16, DType::BFloat16, DType::Float64};

enum class Layout { Contiguous, Transposed, Strided };

double randomValue(DType dtype, std::mt19937& rng, double low, double high) {
  if (dtype == DType::Bool) return std::bernoulli_distribution(0.5)(rng) ? 1.0 : 0.0;
  if (isInteger(dtype)) {
    return static_cast<double>(std::uniform_int_distribution<int>(static_cast<int>(low), static_cast<int>(high))(rng));
  }
  return std::uniform_real_distribution<double>(low, high)(rng);
}

// A random tensor of `shape` laid out as asked: Transposed swaps the last two axes of a
// contiguous base, Strided reads every other element of a wider base starting at offset 1.
Tensor randomTensor(DType dtype, const Shape& shape, std::mt19937& rng, Layout layout, double low = -4.0,
                    double high = 4.0) {
  if (layout == Layout::Transposed && shape.rank() < 2) layout = Layout::Strided;
  Shape base_shape = shape;
  if (layout == Layout::Transposed) std::swap(base_shape[shape.rank() - 1], base_shape[shape.rank() - 2]);
  if (layout == Layout::Strided) {
    if (shape.rank() == 0)
      layout = Layout::Contiguous;
    else
      base_shape[shape.rank() - 1] = shape[shape.rank() - 1] * 2 + 1;
  }
  Tensor base = Tensor::empty(dtype, base_shape).value();
  for (std::int64_t i = 0; i < base.numel(); ++i)
    storeFromDouble(base.rawData(), dtype, i, randomValue(dtype, rng, low, high));
  if (layout == Layout::Contiguous) return base;
  Shape strides = base.strides();
  std::int64_t offset = 0;
  if (layout == Layout::Transposed) {
    std::swap(strides[shape.rank() - 1], strides[shape.rank() - 2]);
  } else {
    strides[shape.rank() - 1] = 2;
    offset = 1;
  }
  return base.asStrided(shape, strides, offset).value();
}

std::vector<std::int64_t> unravel(std::int64_t linear, const Shape& shape) {
  std::vector<std::int64_t> index(static_cast<std::size_t>(shape.rank()));
  for (int d = shape.rank() - 1; d >= 0; --d) {
    index[static_cast<std::size_t>(d)] = linear % shape[d];
    linear /= shape[d];
  }
  return index;
}

// Element of `t` seen at output index `index` under numpy broadcasting (right-aligned).
double broadcastRead(const Tensor& t, const std::vector<std::int64_t>& index) {
  const std::size_t lead = index.size() - static_cast<std::size_t>(t.rank());
  std::int64_t linear = 0;
  for (int d = 0; d < t.rank(); ++d) {
    const std::int64_t i = t.dim(d) == 1 ? 0 : index[lead + static_cast<std::size_t>(d)];
    linear = linear * t.dim(d) + i;
  }
  return t.elementAsDouble(linear);
}

Shape broadcastReference(const Shape& a, const Shape& b) {
  const int rank = std::max(a.rank(), b.rank());
  Shape out;
  for (int i = 0; i < rank; ++i) {
    const int ia = i - (rank - a.rank()), ib = i - (rank - b.rank());
    const std::int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
    out.push_back(da == 1 ? db : da);
  }
  return out;
}

double relativeTolerance(DType dtype) {
  switch (dtype) {
    case DType::Float32:
      return 1e-6;
    case DType::Float16:
      return 1e-3;
    case DType::BFloat16:
      return 8e-3;
    case DType::Float64:
      return 1e-12;
    default:
      return 0.0;
  }
}

void expectNear(double got, double want, DType dtype, const std::string& where) {
  if (std::isnan(want)) {
    EXPECT_TRUE(std::isnan(got)) << where << ": got " << got << ", want NaN";
    return;
  }
  if (std::isinf(want)) {
    EXPECT_EQ(got, want) << where;
    return;
  }
  const double tolerance = relativeTolerance(dtype) * std::fabs(want) + (isFloating(dtype) ? 1e-30 : 0.0);
  EXPECT_LE(std::fabs(got - want), tolerance) << where << ": got " << got << ", want " << want;
}

Tensor call1(const std::string& op, std::vector<Value> inputs,
             std::vector<std::pair<std::string, AttrValue>> attrs = {}) {
  auto result = callOp(op, std::move(inputs), std::move(attrs));
  EXPECT_TRUE(result.hasValue()) << op << ": " << (result.hasValue() ? "" : result.status().toString());
  if (!result.hasValue()) return Tensor::scalar(0.0, DType::Float32);
  EXPECT_EQ(result->size(), 1u);
  EXPECT_TRUE((*result)[0].isTensor());
  return (*result)[0].tensor();
}

Status callStatus(const std::string& op, std::vector<Value> inputs,
                  std::vector<std::pair<std::string, AttrValue>> attrs = {}) {
  auto result = callOp(op, std::move(inputs), std::move(attrs));
  return result.hasValue() ? Status::ok() : std::move(result).status();
}

Value tv(const Tensor& t) {
  return Value::fromTensor(t);
}

// ---- binary ops ----

struct BinaryCase {
  std::string op;
  std::function<double(double, double)> reference;
  bool comparison = false;
  bool needs_positive_base = false;  // pow on floats
};

std::vector<BinaryCase> arithmeticCases() {
  return {
      {"add", [](double a, double b) { return a + b; }},
      {"sub", [](double a, double b) { return a - b; }},
      {"mul", [](double a, double b) { return a * b; }},
      {"div", [](double a, double b) { return a / b; }},
      {"pow", [](double a, double b) { return std::pow(a, b); }, false, true},
      {"maximum", [](double a, double b) { return a > b ? a : b; }},
      {"minimum", [](double a, double b) { return a < b ? a : b; }},
      {"equal", [](double a, double b) { return a == b ? 1.0 : 0.0; }, true},
      {"not_equal", [](double a, double b) { return a != b ? 1.0 : 0.0; }, true},
      {"less", [](double a, double b) { return a < b ? 1.0 : 0.0; }, true},
      {"less_equal", [](double a, double b) { return a <= b ? 1.0 : 0.0; }, true},
      {"greater", [](double a, double b) { return a > b ? 1.0 : 0.0; }, true},
      {"greater_equal", [](double a, double b) { return a >= b ? 1.0 : 0.0; }, true},
  };
}

struct ShapePair {
  Shape a, b;
  Layout la, lb;
};

std::vector<ShapePair> shapePairs() {
  return {
      {Shape{5}, Shape{5}, Layout::Contiguous, Layout::Contiguous},
      {Shape{4, 37}, Shape{4, 37}, Layout::Contiguous, Layout::Contiguous},  // specialized path, with a tail
      {Shape{3, 1, 5}, Shape{4, 1}, Layout::Contiguous, Layout::Contiguous},
      {Shape{4, 1}, Shape{3, 1, 5}, Layout::Strided, Layout::Strided},
      {Shape{5, 3}, Shape{2, 5, 3}, Layout::Transposed, Layout::Transposed},
      {Shape{6, 7}, Shape{6, 7}, Layout::Transposed, Layout::Strided},
      {Shape{2, 3, 4}, Shape{4}, Layout::Strided, Layout::Contiguous},
      {Shape{2, 3, 4}, Shape{}, Layout::Transposed, Layout::Contiguous},
      {Shape{}, Shape{}, Layout::Contiguous, Layout::Contiguous},
      {Shape{0, 3}, Shape{3}, Layout::Contiguous, Layout::Contiguous},
  };
}

// Integer results must match exactly; integer division truncates toward zero.
double integerReference(const BinaryCase& c, double a, double b) {
  if (c.op == "div") return std::trunc(a / b);
  return c.reference(a, b);
}

void checkBinary(const BinaryCase& c, DType dtype, const ShapePair& pair, std::mt19937& rng) {
  const bool integer = isInteger(dtype);
  double low = integer ? -9 : -3, high = integer ? 9 : 3;
  if (c.comparison) low = -2, high = 2;  // ties happen
  Tensor a = randomTensor(dtype, pair.a, rng, pair.la, c.needs_positive_base ? 0.1 : low, high);
  double b_low = low, b_high = high;
  if (c.op == "pow") b_low = integer ? 0 : -2, b_high = integer ? 4 : 2;
  // Nonzero divisors (negative integer divisors are covered by IntegerDivisionTruncatesTowardZero).
  if (c.op == "div") b_low = integer ? 1 : 0.5, b_high = integer ? 9 : 3;
  Tensor b = randomTensor(dtype, pair.b, rng, pair.lb, b_low, b_high);
  const std::string where = c.op + " " + std::string(dtypeName(dtype)) + " " + a.describe() + " " + b.describe();
  SCOPED_TRACE(where);
  Tensor out = call1(c.op, {tv(a), tv(b)});
  const Shape shape = broadcastReference(pair.a, pair.b);
  ASSERT_EQ(out.shape(), shape);
  ASSERT_EQ(out.dtype(), c.comparison ? DType::Bool : dtype);
  for (std::int64_t i = 0; i < shape.numel(); ++i) {
    const auto index = unravel(i, shape);
    const double x = broadcastRead(a, index), y = broadcastRead(b, index);
    const double want = integer ? integerReference(c, x, y) : c.reference(x, y);
    expectNear(out.elementAsDouble(i), want, out.dtype(), where + " element " + std::to_string(i));
  }
}

TEST(ElementwiseBinary, AllOpsAllDTypesShapesAndLayouts) {
  std::mt19937 rng(1234);
  for (const BinaryCase& c : arithmeticCases()) {
    for (DType dtype : kAllDTypes) {
      if (dtype == DType::Bool) continue;  // bool operands have their own test
      for (const ShapePair& pair : shapePairs()) checkBinary(c, dtype, pair, rng);
    }
  }
}

TEST(ElementwiseBinary, SpecializedFloat32EntryIsChosenAndAgreesWithGeneric) {
  std::mt19937 rng(7);
  const OpRegistry& registry = OpRegistry::global();
  Tensor a = randomTensor(DType::Float32, Shape{64, 64}, rng, Layout::Contiguous);
  Tensor b = randomTensor(DType::Float32, Shape{64, 64}, rng, Layout::Contiguous);
  Value va = tv(a), vb = tv(b);
  const Value* inputs[] = {&va, &vb};
  EXPECT_EQ(registry.resolve(OpId::Add, inputs).name, "add.f32.contiguous_same_shape");
  EXPECT_EQ(registry.resolve(OpId::Mul, inputs).name, "mul.f32.contiguous_same_shape");
  // The same values through a non-contiguous layout take the generic entry and must agree.
  Tensor bt = Tensor::empty(DType::Float32, Shape{64, 64}).value();
  for (std::int64_t i = 0; i < 64; ++i) {
    for (std::int64_t j = 0; j < 64; ++j)
      storeFromDouble(bt.rawData(), DType::Float32, j * 64 + i, b.elementAsDouble(i * 64 + j));
  }
  Tensor b_view = bt.asStrided(Shape{64, 64}, Shape{1, 64}, 0).value();
  Value vbv = tv(b_view);
  const Value* view_inputs[] = {&va, &vbv};
  EXPECT_EQ(registry.resolve(OpId::Add, view_inputs).name, "add.generic");
  for (const char* op : {"add", "sub", "mul", "div", "maximum", "less"}) {
    Tensor fast = call1(op, {va, vb});
    Tensor slow = call1(op, {va, vbv});
    ASSERT_EQ(fast.numel(), slow.numel());
    for (std::int64_t i = 0; i < fast.numel(); ++i)
      ASSERT_EQ(fast.elementAsDouble(i), slow.elementAsDouble(i)) << op << " " << i;
  }
  // The scalar operand variant of the contiguous entry.
  Tensor scaled = call1("mul", {va, Value::fromFloat(0.5)});
  for (std::int64_t i = 0; i < a.numel(); ++i) EXPECT_EQ(scaled.elementAsDouble(i), a.elementAsDouble(i) * 0.5);
  Tensor reversed = call1("sub", {Value::fromInt(3), va});
  for (std::int64_t i = 0; i < a.numel(); ++i)
    expectNear(reversed.elementAsDouble(i), 3 - a.elementAsDouble(i), DType::Float32, "3 - a");
}

TEST(ElementwiseBinary, ScalarOperandsAreWeak) {
  std::mt19937 rng(11);
  Tensor h = randomTensor(DType::Float16, Shape{3, 4}, rng, Layout::Transposed);
  Tensor out = call1("mul", {tv(h), Value::fromFloat(2.5)});
  EXPECT_EQ(out.dtype(), DType::Float16);
  for (std::int64_t i = 0; i < 12; ++i)
    expectNear(out.elementAsDouble(i), h.elementAsDouble(i) * 2.5, DType::Float16, "f16*2.5");
  Tensor ints = randomTensor(DType::Int32, Shape{5}, rng, Layout::Strided, -50, 50);
  Tensor shifted = call1("add", {tv(ints), Value::fromInt(3)});
  EXPECT_EQ(shifted.dtype(), DType::Int32);
  for (std::int64_t i = 0; i < 5; ++i) EXPECT_EQ(shifted.elementAsDouble(i), ints.elementAsDouble(i) + 3);
  Tensor halves = call1("add", {tv(ints), Value::fromFloat(0.5)});
  EXPECT_EQ(halves.dtype(), DType::Float32);
  for (std::int64_t i = 0; i < 5; ++i) EXPECT_EQ(halves.elementAsDouble(i), ints.elementAsDouble(i) + 0.5);
  Tensor both = call1("add", {Value::fromInt(2), Value::fromInt(40)});
  EXPECT_EQ(both.dtype(), DType::Int64);
  EXPECT_EQ(both.rank(), 0);
  EXPECT_EQ(both.elementAsDouble(0), 42.0);
  Tensor both_float = call1("mul", {Value::fromFloat(1.5), Value::fromFloat(-3.0)});
  EXPECT_EQ(both_float.dtype(), DType::Float32);
  EXPECT_EQ(both_float.elementAsDouble(0), -4.5);
}

TEST(ElementwiseBinary, MixedDTypesPromote) {
  std::mt19937 rng(5);
  struct Mix {
    DType a, b, result;
  };
  const Mix mixes[] = {
      {DType::Int32, DType::Float32, DType::Float32},    {DType::Int32, DType::Int64, DType::Int64},
      {DType::Float16, DType::BFloat16, DType::Float32}, {DType::Bool, DType::Int32, DType::Int32},
      {DType::Float32, DType::Float64, DType::Float64},  {DType::Float16, DType::Float32, DType::Float32}};
  for (const Mix& mix : mixes) {
    Tensor a = randomTensor(mix.a, Shape{3, 1, 5}, rng, Layout::Strided, -9, 9);
    Tensor b = randomTensor(mix.b, Shape{4, 1}, rng, Layout::Contiguous, -9, 9);
    Tensor out = call1("add", {tv(a), tv(b)});
    ASSERT_EQ(out.dtype(), mix.result);
    ASSERT_EQ(out.shape(), (Shape{3, 4, 5}));
    for (std::int64_t i = 0; i < out.numel(); ++i) {
      const auto index = unravel(i, out.shape());
      expectNear(out.elementAsDouble(i), broadcastRead(a, index) + broadcastRead(b, index), mix.result, "mixed add");
    }
  }
}

TEST(ElementwiseBinary, IntegerDivisionTruncatesTowardZero) {
  for (DType dtype : {DType::Int32, DType::Int64}) {
    Tensor a = Tensor::empty(dtype, Shape{6}).value();
    Tensor b = Tensor::empty(dtype, Shape{6}).value();
    const double as[] = {7, -7, 7, -7, 1, -9};
    const double bs[] = {2, 2, -2, -2, 3, 4};
    const double want[] = {3, -3, -3, 3, 0, -2};
    for (int i = 0; i < 6; ++i) {
      storeFromDouble(a.rawData(), dtype, i, as[i]);
      storeFromDouble(b.rawData(), dtype, i, bs[i]);
    }
    Tensor out = call1("div", {tv(a), tv(b)});
    for (int i = 0; i < 6; ++i) EXPECT_EQ(out.elementAsDouble(i), want[i]) << as[i] << " / " << bs[i];
  }
  // INT_MIN / -1 wraps instead of trapping.
  Tensor low = Tensor::scalar(static_cast<double>(std::numeric_limits<std::int32_t>::min()), DType::Int32);
  Tensor out = call1("div", {tv(low), Value::fromInt(-1)});
  EXPECT_EQ(out.elementAsDouble(0), static_cast<double>(std::numeric_limits<std::int32_t>::min()));
}

TEST(ElementwiseBinary, IntegerArithmeticWrapsWithoutUndefinedBehaviour) {
  Tensor big = Tensor::scalar(static_cast<double>(std::numeric_limits<std::int32_t>::max()), DType::Int32);
  Tensor sum = call1("add", {tv(big), Value::fromInt(1)});
  EXPECT_EQ(sum.elementAsDouble(0), static_cast<double>(std::numeric_limits<std::int32_t>::min()));
  Tensor product = call1("mul", {tv(big), tv(big)});
  EXPECT_EQ(product.elementAsDouble(0), 1.0);  // (2^31 - 1)^2 mod 2^32
  Tensor power = call1("pow", {Value::fromInt(3), Value::fromInt(4)});
  EXPECT_EQ(power.elementAsDouble(0), 81.0);
}

TEST(ElementwiseBinary, MaximumMinimumPropagateNaN) {
  for (DType dtype : kFloatDTypes) {
    Tensor a = Tensor::empty(dtype, Shape{3}).value();
    Tensor b = Tensor::empty(dtype, Shape{3}).value();
    const double nan = std::numeric_limits<double>::quiet_NaN();
    const double as[] = {nan, 1.0, -2.0}, bs[] = {1.0, nan, 3.0};
    for (int i = 0; i < 3; ++i) {
      storeFromDouble(a.rawData(), dtype, i, as[i]);
      storeFromDouble(b.rawData(), dtype, i, bs[i]);
    }
    for (const char* op : {"maximum", "minimum"}) {
      Tensor out = call1(op, {tv(a), tv(b)});
      EXPECT_TRUE(std::isnan(out.elementAsDouble(0))) << op << dtypeName(dtype);
      EXPECT_TRUE(std::isnan(out.elementAsDouble(1))) << op << dtypeName(dtype);
      EXPECT_EQ(out.elementAsDouble(2), std::string(op) == "maximum" ? 3.0 : -2.0);
    }
  }
}

TEST(ElementwiseBinary, BoolOperands) {
  std::mt19937 rng(3);
  Tensor a = randomTensor(DType::Bool, Shape{3, 1, 5}, rng, Layout::Strided);
  Tensor b = randomTensor(DType::Bool, Shape{4, 1}, rng, Layout::Contiguous);
  struct Case {
    const char* op;
    std::function<bool(bool, bool)> reference;
  };
  const Case cases[] = {
      {"logical_and", [](bool x, bool y) { return x && y; }}, {"logical_or", [](bool x, bool y) { return x || y; }},
      {"add", [](bool x, bool y) { return x || y; }},         {"mul", [](bool x, bool y) { return x && y; }},
      {"maximum", [](bool x, bool y) { return x || y; }},     {"equal", [](bool x, bool y) { return x == y; }},
      {"less", [](bool x, bool y) { return !x && y; }}};
  for (const Case& c : cases) {
    Tensor out = call1(c.op, {tv(a), tv(b)});
    ASSERT_EQ(out.dtype(), DType::Bool) << c.op;
    ASSERT_EQ(out.shape(), (Shape{3, 4, 5}));
    for (std::int64_t i = 0; i < out.numel(); ++i) {
      const auto index = unravel(i, out.shape());
      const bool want = c.reference(broadcastRead(a, index) != 0, broadcastRead(b, index) != 0);
      EXPECT_EQ(out.elementAsDouble(i), want ? 1.0 : 0.0) << c.op << " " << i;
    }
  }
  Tensor both = call1("logical_or", {Value::fromBool(false), Value::fromBool(true)});
  EXPECT_EQ(both.dtype(), DType::Bool);
  EXPECT_EQ(both.elementAsDouble(0), 1.0);
}

TEST(ElementwiseErrors, BroadcastMismatchNamesOpAndShapes) {
  std::mt19937 rng(2);
  Tensor a = randomTensor(DType::Float32, Shape{3, 1, 5}, rng, Layout::Contiguous);
  Tensor b = randomTensor(DType::Float32, Shape{4, 2}, rng, Layout::Contiguous);
  Status status = callStatus("add", {tv(a), tv(b)});
  ASSERT_FALSE(status.isOk());
  EXPECT_EQ(status.code(), ErrorCode::ShapeMismatch);
  EXPECT_NE(status.message().find("add"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("[3,1,5]"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("[4,2]"), std::string::npos) << status.message();
  Status where_status = callStatus("where", {Value::fromBool(true), tv(a), tv(b)});
  EXPECT_EQ(where_status.code(), ErrorCode::ShapeMismatch);
  Status add_n_status = callStatus("add_n", {tv(a), tv(a), tv(b)});
  EXPECT_EQ(add_n_status.code(), ErrorCode::ShapeMismatch);
  EXPECT_NE(add_n_status.message().find("[4,2]"), std::string::npos) << add_n_status.message();
}

TEST(ElementwiseErrors, IntegerDivisionByZero) {
  for (DType dtype : {DType::Int32, DType::Int64}) {
    Tensor a = Tensor::empty(dtype, Shape{4}).value();
    Tensor b = Tensor::empty(dtype, Shape{2, 1}).value();
    for (int i = 0; i < 4; ++i) storeFromDouble(a.rawData(), dtype, i, i + 1);
    storeFromDouble(b.rawData(), dtype, 0, 3);
    storeFromDouble(b.rawData(), dtype, 1, 0);
    Status status = callStatus("div", {tv(a), tv(b)});
    EXPECT_EQ(status.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(status.message().find("division by zero"), std::string::npos) << status.message();
  }
  EXPECT_EQ(callStatus("div", {Value::fromInt(1), Value::fromInt(0)}).code(), ErrorCode::InvalidArgument);
  // Float division by zero is IEEE: inf.
  Tensor inf = call1("div", {Value::fromFloat(1.0), Value::fromFloat(0.0)});
  EXPECT_TRUE(std::isinf(inf.elementAsDouble(0)));
  EXPECT_EQ(callStatus("pow", {Value::fromInt(2), Value::fromInt(-1)}).code(), ErrorCode::InvalidArgument);
}

TEST(ElementwiseErrors, LogicalOpsNeedBool) {
  std::mt19937 rng(4);
  Tensor f = randomTensor(DType::Float32, Shape{3}, rng, Layout::Contiguous);
  Tensor b = randomTensor(DType::Bool, Shape{3}, rng, Layout::Contiguous);
  for (const char* op : {"logical_and", "logical_or"}) {
    Status status = callStatus(op, {tv(f), tv(b)});
    EXPECT_EQ(status.code(), ErrorCode::DTypeMismatch) << op;
    EXPECT_NE(status.message().find("bool"), std::string::npos) << status.message();
  }
  EXPECT_EQ(callStatus("logical_not", {tv(f)}).code(), ErrorCode::DTypeMismatch);
  EXPECT_EQ(callStatus("sub", {tv(b), tv(b)}).code(), ErrorCode::DTypeMismatch);
  EXPECT_EQ(callStatus("neg", {tv(b)}).code(), ErrorCode::DTypeMismatch);
}

// ---- unary ops ----

struct UnaryCase {
  std::string op;
  std::function<double(double)> reference;
  double low, high;
  bool keeps_integer_dtype;  // neg/abs/relu; the rest return float32 for integer input
};

std::vector<UnaryCase> unaryCases() {
  return {
      {"neg", [](double x) { return -x; }, -5, 5, true},
      {"abs", [](double x) { return std::fabs(x); }, -5, 5, true},
      {"relu", [](double x) { return x > 0 ? x : 0.0; }, -5, 5, true},
      {"exp", [](double x) { return std::exp(x); }, -5, 5, false},
      {"log", [](double x) { return std::log(x); }, 1, 9, false},
      {"sqrt", [](double x) { return std::sqrt(x); }, 0, 9, false},
      {"rsqrt", [](double x) { return 1.0 / std::sqrt(x); }, 1, 9, false},
      {"sigmoid", [](double x) { return 1.0 / (1.0 + std::exp(-x)); }, -6, 6, false},
      {"tanh", [](double x) { return std::tanh(x); }, -3, 3, false},
      {"gelu", [](double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }, -3, 3, false},
      {"erf", [](double x) { return std::erf(x); }, -3, 3, false},
      {"silu", [](double x) { return x / (1.0 + std::exp(-x)); }, -6, 6, false},
  };
}

TEST(ElementwiseUnary, AllOpsAllDTypesAndLayouts) {
  std::mt19937 rng(99);
  const Shape shapes[] = {Shape{17}, Shape{3, 4, 5}, Shape{}, Shape{2, 0}};
  const Layout layouts[] = {Layout::Contiguous, Layout::Transposed, Layout::Strided};
  for (const UnaryCase& c : unaryCases()) {
    for (DType dtype : kAllDTypes) {
      if (dtype == DType::Bool) continue;
      for (const Shape& shape : shapes) {
        for (Layout layout : layouts) {
          Tensor x = randomTensor(dtype, shape, rng, layout, c.low, c.high);
          const std::string where = c.op + " " + x.describe();
          SCOPED_TRACE(where);
          Tensor out = call1(c.op, {tv(x)});
          const DType want_dtype = isFloating(dtype) || c.keeps_integer_dtype ? dtype : DType::Float32;
          ASSERT_EQ(out.dtype(), want_dtype);
          ASSERT_EQ(out.shape(), shape);
          for (std::int64_t i = 0; i < x.numel(); ++i) {
            expectNear(out.elementAsDouble(i), c.reference(x.elementAsDouble(i)), want_dtype, where);
          }
        }
      }
    }
  }
}

TEST(ElementwiseUnary, SpecialValues) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor x = Tensor::empty(DType::Float32, Shape{4}).value();
  const double xs[] = {nan, -1.0, 0.0, std::numeric_limits<double>::infinity()};
  for (int i = 0; i < 4; ++i) storeFromDouble(x.rawData(), DType::Float32, i, xs[i]);
  Tensor relu = call1("relu", {tv(x)});
  EXPECT_TRUE(std::isnan(relu.elementAsDouble(0)));
  EXPECT_EQ(relu.elementAsDouble(1), 0.0);
  EXPECT_TRUE(std::isinf(relu.elementAsDouble(3)));
  Tensor log = call1("log", {tv(x)});
  EXPECT_TRUE(std::isnan(log.elementAsDouble(1)));
  EXPECT_TRUE(std::isinf(log.elementAsDouble(2)));
  Tensor sigmoid = call1("sigmoid", {tv(x)});
  EXPECT_EQ(sigmoid.elementAsDouble(3), 1.0);
  Tensor low = Tensor::scalar(static_cast<double>(std::numeric_limits<std::int64_t>::min()), DType::Int64);
  Tensor negated = call1("neg", {tv(low)});  // wraps, no UB
  EXPECT_EQ(negated.elementAsDouble(0), static_cast<double>(std::numeric_limits<std::int64_t>::min()));
}

TEST(ElementwiseUnary, LogicalNot) {
  std::mt19937 rng(8);
  Tensor b = randomTensor(DType::Bool, Shape{5, 6}, rng, Layout::Transposed);
  Tensor out = call1("logical_not", {tv(b)});
  ASSERT_EQ(out.dtype(), DType::Bool);
  for (std::int64_t i = 0; i < b.numel(); ++i) EXPECT_EQ(out.elementAsDouble(i), b.elementAsDouble(i) != 0 ? 0.0 : 1.0);
}

// ---- where, cast, add_n, identity, contiguous ----

TEST(ElementwiseWhere, BroadcastsAllThreeAndPromotes) {
  std::mt19937 rng(21);
  for (DType dtype : kAllDTypes) {
    Tensor cond = randomTensor(DType::Bool, Shape{1, 5}, rng, Layout::Strided);
    Tensor a = randomTensor(dtype, Shape{3, 1, 5}, rng, Layout::Strided, -9, 9);
    Tensor b = randomTensor(dtype, Shape{4, 1}, rng, Layout::Contiguous, -9, 9);
    Tensor out = call1("where", {tv(cond), tv(a), tv(b)});
    ASSERT_EQ(out.dtype(), dtype);
    ASSERT_EQ(out.shape(), (Shape{3, 4, 5}));
    for (std::int64_t i = 0; i < out.numel(); ++i) {
      const auto index = unravel(i, out.shape());
      const double want = broadcastRead(cond, index) != 0 ? broadcastRead(a, index) : broadcastRead(b, index);
      EXPECT_EQ(out.elementAsDouble(i), want) << dtypeName(dtype) << " " << i;
    }
  }
  // Non-bool conditions count nonzero as true; a scalar branch takes the tensor's dtype.
  Tensor cond = randomTensor(DType::Int32, Shape{6}, rng, Layout::Contiguous, -1, 1);
  Tensor a = randomTensor(DType::Float16, Shape{6}, rng, Layout::Contiguous);
  Tensor out = call1("where", {tv(cond), tv(a), Value::fromFloat(-0.5)});
  ASSERT_EQ(out.dtype(), DType::Float16);
  for (std::int64_t i = 0; i < 6; ++i)
    EXPECT_EQ(out.elementAsDouble(i), cond.elementAsDouble(i) != 0 ? a.elementAsDouble(i) : -0.5);
}

// Reference conversion written independently of the kernel.
double castReference(double v, DType to) {
  switch (to) {
    case DType::Bool:
      return v != 0 || std::isnan(v) ? 1.0 : 0.0;
    case DType::Int32:
    case DType::Int64: {
      if (std::isnan(v)) return 0.0;
      const double low = to == DType::Int32 ? -2147483648.0 : -9223372036854775808.0;
      const double high = to == DType::Int32 ? 2147483647.0 : 9223372036854775807.0;
      return std::min(std::max(std::trunc(v), low), high);
    }
    default:
      return v;
  }
}

TEST(ElementwiseCast, EveryPairOfDTypes) {
  std::mt19937 rng(31);
  for (DType from : kAllDTypes) {
    for (DType to : kAllDTypes) {
      Tensor x = randomTensor(from, Shape{4, 9}, rng, Layout::Transposed, -100, 100);
      Tensor out = call1("cast", {tv(x)}, {{"dtype", AttrValue::ofDType(to)}});
      ASSERT_EQ(out.dtype(), to);
      ASSERT_EQ(out.shape(), x.shape());
      for (std::int64_t i = 0; i < x.numel(); ++i) {
        expectNear(out.elementAsDouble(i), castReference(x.elementAsDouble(i), to), to,
                   std::string(dtypeName(from)) + "->" + std::string(dtypeName(to)));
      }
    }
  }
}

TEST(ElementwiseCast, FloatToIntTruncatesSaturatesAndMapsNaNToZero) {
  const double inf = std::numeric_limits<double>::infinity();
  const double values[] = {2.9, -2.9, std::numeric_limits<double>::quiet_NaN(), 1e20, -1e20, inf, -inf, 0.5};
  for (DType from : {DType::Float32, DType::Float64, DType::Float16}) {
    Tensor x = Tensor::empty(from, Shape{8}).value();
    for (int i = 0; i < 8; ++i) storeFromDouble(x.rawData(), from, i, values[i]);
    for (DType to : {DType::Int32, DType::Int64, DType::Bool}) {
      Tensor out = call1("cast", {tv(x)}, {{"dtype", AttrValue::ofDType(to)}});
      for (int i = 0; i < 8; ++i) {
        EXPECT_EQ(out.elementAsDouble(i), castReference(x.elementAsDouble(i), to))
            << dtypeName(from) << "->" << dtypeName(to) << " of " << x.elementAsDouble(i);
      }
    }
  }
  Tensor same = Tensor::scalar(3.0, DType::Float32);
  Tensor out = call1("cast", {tv(same)}, {{"dtype", AttrValue::ofDType(DType::Float32)}});
  EXPECT_TRUE(out.sharesStorageWith(same));
}

TEST(ElementwiseAddN, SumsWithBroadcastingAndPromotion) {
  std::mt19937 rng(41);
  for (DType dtype : kAllDTypes) {
    if (dtype == DType::Bool) continue;
    Tensor a = randomTensor(dtype, Shape{3, 1, 5}, rng, Layout::Strided, -9, 9);
    Tensor b = randomTensor(dtype, Shape{4, 1}, rng, Layout::Transposed, -9, 9);
    Tensor c = randomTensor(dtype, Shape{5}, rng, Layout::Contiguous, -9, 9);
    Tensor out = call1("add_n", {tv(a), tv(b), tv(c), Value::fromInt(2)});
    ASSERT_EQ(out.dtype(), dtype);
    ASSERT_EQ(out.shape(), (Shape{3, 4, 5}));
    for (std::int64_t i = 0; i < out.numel(); ++i) {
      const auto index = unravel(i, out.shape());
      const double x = broadcastRead(a, index), y = broadcastRead(b, index), z = broadcastRead(c, index);
      const double want = x + y + z + 2;
      // Each of the three partial sums rounds (float16/bfloat16 to their own precision).
      const double step_error = dtype == DType::Float16 || dtype == DType::BFloat16 ? relativeTolerance(DType::BFloat16)
                                                                                    : relativeTolerance(dtype);
      const double tolerance = 3 * step_error * (std::fabs(x) + std::fabs(y) + std::fabs(z) + 2);
      EXPECT_LE(std::fabs(out.elementAsDouble(i) - want), tolerance)
          << "add_n " << dtypeName(dtype) << " element " << i;
    }
  }
  Tensor single = Tensor::scalar(1.5, DType::Float64);
  EXPECT_EQ(call1("add_n", {tv(single)}).elementAsDouble(0), 1.5);
  Tensor mixed = call1("add_n", {tv(Tensor::scalar(1, DType::Int32)), tv(Tensor::scalar(0.25, DType::Float32))});
  EXPECT_EQ(mixed.dtype(), DType::Float32);
  EXPECT_EQ(mixed.elementAsDouble(0), 1.25);
}

TEST(ElementwiseIdentity, IdentityAndContiguous) {
  std::mt19937 rng(51);
  Tensor x = randomTensor(DType::Float32, Shape{4, 6}, rng, Layout::Contiguous);
  Tensor same = call1("identity", {tv(x)});
  EXPECT_TRUE(same.sharesStorageWith(x));
  EXPECT_EQ(same.rawData(), x.rawData());
  Tensor kept = call1("contiguous", {tv(x)});
  EXPECT_EQ(kept.rawData(), x.rawData());
  Tensor view = randomTensor(DType::BFloat16, Shape{5, 7}, rng, Layout::Transposed);
  Tensor copied = call1("contiguous", {tv(view)});
  EXPECT_TRUE(copied.isContiguous());
  EXPECT_FALSE(copied.sharesStorageWith(view));
  for (std::int64_t i = 0; i < view.numel(); ++i) EXPECT_EQ(copied.elementAsDouble(i), view.elementAsDouble(i));
  Tensor from_scalar = call1("identity", {Value::fromFloat(2.5)});
  EXPECT_EQ(from_scalar.rank(), 0);
  EXPECT_EQ(from_scalar.elementAsDouble(0), 2.5);
}

// outputBuffer: the previous output's storage is reused for another shape that fits (dynamic
// shapes change from call to call), never when it is shared, too small, or far too large.
TEST(OutputBuffer, ReusesStorageAcrossShapesOnlyWhenSafe) {
  const OpSchema& schema = OpRegistry::global().schema(OpId::Add);
  auto reuse = [&](Value previous, DType dtype, const Shape& shape, const void** old_bytes) {
    *old_bytes = previous.tensor().rawData();
    std::vector<Value> outputs = {std::move(previous)};
    OpContext ctx{&schema, {}, {}, outputs};
    auto got = outputBuffer(ctx, 0, dtype, shape);
    EXPECT_TRUE(got.hasValue());
    return *got;
  };
  const void* old_bytes = nullptr;
  auto fresh = [](const Shape& shape) { return Value::fromTensor(*Tensor::empty(DType::Float32, shape)); };
  // Smaller: the same bytes, now a contiguous [32, 8, 256] from the start, and sole-owned.
  Tensor smaller = reuse(fresh(Shape{32, 128, 256}), DType::Float32, Shape{32, 8, 256}, &old_bytes);
  EXPECT_EQ(smaller.rawData(), old_bytes);
  EXPECT_EQ(smaller.shape(), (Shape{32, 8, 256}));
  EXPECT_TRUE(smaller.isContiguous());
  EXPECT_EQ(smaller.offset(), 0);
  EXPECT_TRUE(smaller.isSoleOwner());
  // ...and back up to the storage's full size: reused again.
  std::vector<Value> keep = {Value::fromTensor(smaller)};
  smaller = Tensor();
  Tensor again = reuse(std::move(keep[0]), DType::Float32, Shape{32, 128, 256}, &old_bytes);
  EXPECT_EQ(again.rawData(), old_bytes);
  EXPECT_EQ(again.numel(), 32 * 128 * 256);
  // Larger than the storage, more than 16x smaller, another dtype, or shared: a fresh buffer.
  EXPECT_NE(reuse(fresh(Shape{32, 8, 256}), DType::Float32, Shape{32, 9, 256}, &old_bytes).rawData(), old_bytes);
  EXPECT_NE(reuse(fresh(Shape{32, 128, 256}), DType::Float32, Shape{32, 7, 256}, &old_bytes).rawData(), old_bytes);
  EXPECT_NE(reuse(fresh(Shape{64, 64}), DType::Int32, Shape{32, 64}, &old_bytes).rawData(), old_bytes);
  Value shared = fresh(Shape{64, 64});
  const Value other_handle = shared;
  EXPECT_NE(reuse(shared, DType::Float32, Shape{32, 64}, &old_bytes).rawData(), old_bytes);
  // A view that does not start at its storage's start is not reused for another shape.
  Tensor base = *Tensor::empty(DType::Float32, Shape{64, 64});
  Tensor tail = *base.asStrided(Shape{32, 64}, Shape{64, 1}, 32 * 64);
  base = Tensor();
  EXPECT_TRUE(tail.isSoleOwner());
  const Storage* tail_storage = tail.storage();
  Tensor not_tail = reuse(Value::fromTensor(std::move(tail)), DType::Float32, Shape{16, 64}, &old_bytes);
  EXPECT_NE(not_tail.storage(), tail_storage);
  // A bad shape still gets Tensor::empty's error.
  std::vector<Value> outputs = {fresh(Shape{64, 64})};
  OpContext ctx{&schema, {}, {}, outputs};
  EXPECT_FALSE(outputBuffer(ctx, 0, DType::Float32, Shape{-1, 4}).hasValue());
}

}  // namespace
}  // namespace shapevm
