// SPDX-License-Identifier: Apache-2.0
// The elementwise kernel family against the reference kernels: every op, float32/float16/bfloat16
// (and float64/int32/int64/bool where supported), static and symbolic specs, odd sizes, numpy
// broadcasting up to rank 8, transposed and strided inputs, scalar operands, dtype promotion,
// NaN/inf behaviour, and the specs the family rejects. Symbolic kernels are compiled once and run
// on several shapes. Inputs are fresh random tensors, never all zeros, drawn from each op's
// domain (positive for log/sqrt/rsqrt/pow bases, away from zero for divisors, coarse values for
// comparisons so ties occur).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "jit_test_util.h"
#include "ops/kernel_util.h"

namespace shapevm::jit {
namespace {

using namespace testing;  // jit_test_util.h

// ---- inputs ----

enum class Domain {
  Normal,     // floats uniform in [-4, 4], ints in [-100, 100]
  Positive,   // floats in [0.1, 3], ints in [1, 9]
  NonZero,    // floats ±[0.25, 3]
  Coarse,     // multiples of 0.5 in [-2, 2] (ints in [-3, 3]): comparisons see ties
  Wide,       // floats in [-40, 40]
  WideInt,    // ints in [-5000, 5000] (float16 cannot hold them all), floats as Normal
  CastRange,  // a third small, a third huge (±1e10: saturation), a third in [-1, 1]
};

double draw(DType dtype, Domain domain, std::mt19937& rng, std::int64_t i) {
  auto uniform = [&](double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng); };
  auto integer = [&](int lo, int hi) { return static_cast<double>(std::uniform_int_distribution<int>(lo, hi)(rng)); };
  if (dtype == DType::Bool) return integer(0, 1);
  if (isInteger(dtype)) {
    switch (domain) {
      case Domain::Positive:
        return integer(1, 9);
      case Domain::Coarse:
        return integer(-3, 3);
      case Domain::WideInt:
        return integer(-5000, 5000);
      case Domain::CastRange:
        return i % 3 == 1 ? integer(-2000000000, 2000000000) * (dtype == DType::Int64 ? 4096.0 : 1.0)
                          : integer(-300, 300);
      default:
        return integer(-100, 100);
    }
  }
  switch (domain) {
    case Domain::Positive:
      return uniform(0.1, 3.0);
    case Domain::NonZero:
      return (integer(0, 1) ? 1 : -1) * uniform(0.25, 3.0);
    case Domain::Coarse:
      return 0.5 * integer(-4, 4);
    case Domain::Wide:
      return uniform(-40.0, 40.0);
    case Domain::CastRange:
      return i % 3 == 0 ? uniform(-300, 300) : i % 3 == 1 ? uniform(-1e10, 1e10) : uniform(-1, 1);
    default:
      return uniform(-4.0, 4.0);
  }
}

// A random tensor of `shape` in `layout` (a view for Transposed/Strided), never all zeros.
Tensor input(DType dtype, const Shape& shape, std::mt19937& rng, Domain domain = Domain::Normal,
             Layout layout = Layout::Contiguous) {
  Tensor t = randomTensor(dtype, shape, rng, layout);
  const std::int64_t n = t.numel();
  bool nonzero = false;
  shapevm::testing::Index index(static_cast<std::size_t>(shape.rank()), 0);  // row-major odometer
  for (std::int64_t i = 0; i < n; ++i) {
    const double v = draw(dtype, domain, rng, i);
    nonzero = nonzero || v != 0.0;
    setAt(t, index, v);
    for (int d = shape.rank() - 1; d >= 0; --d) {
      if (++index[static_cast<std::size_t>(d)] < shape[d]) break;
      index[static_cast<std::size_t>(d)] = 0;
    }
  }
  if (n > 0 && !nonzero) setAt(t, unravel(0, shape), 1.0);
  return t;
}

// ---- compile once, run many times ----

class Kernel {
 public:
  explicit Kernel(const KernelSpec& spec) : spec_(spec) {
    const KernelFamily* family = familyFor(spec.op);
    if (family == nullptr) {
      ADD_FAILURE() << "no kernel family for " << spec.signature();
      return;
    }
    auto compiled = compileKernel(sharedBackend(), *family, spec);
    if (!compiled) {
      ADD_FAILURE() << spec.signature() << ": " << compiled.status().toString();
      return;
    }
    kernel_ = std::move(*compiled);
  }
  ~Kernel() {
    if (kernel_ != nullptr) {
      EXPECT_TRUE(sharedBackend().free(kernel_->handle).isOk());
    }
  }
  Kernel(const Kernel&) = delete;
  Kernel& operator=(const Kernel&) = delete;

  bool ok() const { return kernel_ != nullptr; }
  const CompiledKernel& compiled() const { return *kernel_; }
  const std::string& symbol() const { return kernel_->handle.symbol; }

  Status run(const std::vector<Value>& inputs, std::vector<Value>& outputs) const {
    if (kernel_ == nullptr) return makeError(ErrorCode::Internal, "kernel did not compile");
    outputs.assign(static_cast<std::size_t>(kernel_->num_outputs), Value());
    return invokeCompiled(*kernel_, pointersTo(inputs), outputs);
  }

  // Kernel vs reference with validate.h's tolerance for the output dtype.
  ::testing::AssertionResult matches(const std::vector<Value>& inputs) const {
    auto expected = referenceOutputs(spec_, inputs);
    if (!expected) return ::testing::AssertionFailure() << "reference failed: " << expected.status().toString();
    std::vector<Value> actual;
    Status status = run(inputs, actual);
    if (!status.isOk()) return ::testing::AssertionFailure() << spec_.signature() << ": " << status.toString();
    Comparison comparison = compareOutputs(*expected, actual);
    if (!comparison.ok) {
      return ::testing::AssertionFailure()
             << symbolOrSpec() << " on " << describeInputs(pointersTo(inputs)) << ": " << comparison.reason;
    }
    return ::testing::AssertionSuccess() << "rel L2 " << comparison.rel_l2;
  }

  // Kernel vs reference element by element, NaN equal to NaN: exact, or within `rel` for values
  // that are finite in both.
  ::testing::AssertionResult matchesWithNaN(const std::vector<Value>& inputs, double rel = 0.0) const {
    auto expected = referenceOutputs(spec_, inputs);
    if (!expected) return ::testing::AssertionFailure() << "reference failed: " << expected.status().toString();
    std::vector<Value> actual;
    Status status = run(inputs, actual);
    if (!status.isOk()) return ::testing::AssertionFailure() << status.toString();
    const Tensor& want = (*expected)[0].tensor();
    const Tensor& got = actual[0].tensor();
    if (want.dtype() != got.dtype() || want.shape() != got.shape()) {
      return ::testing::AssertionFailure() << got.describe() << " where " << want.describe() << " was expected";
    }
    for (std::int64_t i = 0; i < want.numel(); ++i) {
      const double w = want.elementAsDouble(i);
      const double g = got.elementAsDouble(i);
      const bool same =
          (std::isnan(w) && std::isnan(g)) || w == g ||
          (rel > 0 && std::isfinite(w) && std::isfinite(g) && std::fabs(g - w) <= rel * std::fabs(w) + 1e-44);
      if (!same) {
        return ::testing::AssertionFailure() << symbolOrSpec() << " on " << describeInputs(pointersTo(inputs))
                                             << ": element " << i << " is " << g << ", reference " << w;
      }
    }
    return ::testing::AssertionSuccess();
  }

 private:
  std::string symbolOrSpec() const { return kernel_ ? kernel_->handle.symbol : spec_.signature(); }
  KernelSpec spec_;
  std::unique_ptr<CompiledKernel> kernel_;
};

const DType kFloatTypes[] = {DType::Float32, DType::Float16, DType::BFloat16};

// Input domains per op and operand.
Domain domainFor(std::string_view op, int operand) {
  if (op == "log" || op == "sqrt" || op == "rsqrt") return Domain::Positive;
  if (op == "pow") return operand == 0 ? Domain::Positive : Domain::Normal;
  if (op == "div") return operand == 1 ? Domain::NonZero : Domain::Normal;
  if (op == "maximum" || op == "minimum" || op == "equal" || op == "not_equal" || op == "less" || op == "less_equal" ||
      op == "greater" || op == "greater_equal") {
    return Domain::Coarse;
  }
  return Domain::Normal;
}

const char* const kBinaryFloatOps[] = {"add",   "sub",       "mul",  "div",        "pow",     "maximum",      "minimum",
                                       "equal", "not_equal", "less", "less_equal", "greater", "greater_equal"};
const char* const kUnaryFloatOps[] = {"neg",     "abs",  "exp",  "log",  "sqrt", "rsqrt",
                                      "sigmoid", "tanh", "relu", "gelu", "erf",  "silu"};

using ShapePair = std::pair<Shape, Shape>;

// ---- family registration and rejections ----

TEST(ElementwiseFamily, CoversTheListedOpsAndNothingElse) {
  const char* const covered[] = {
      "add",       "sub",  "mul",        "div",     "pow",           "maximum",     "minimum",    "equal",
      "not_equal", "less", "less_equal", "greater", "greater_equal", "logical_and", "logical_or", "logical_not",
      "neg",       "abs",  "exp",        "log",     "sqrt",          "rsqrt",       "sigmoid",    "tanh",
      "relu",      "gelu", "erf",        "silu",    "where",         "cast",        "add_n"};
  for (const char* name : covered) {
    const OpSchema* schema = OpRegistry::global().find(name);
    ASSERT_NE(schema, nullptr) << name;
    const KernelFamily* family = elementwiseFamily(schema->id);
    ASSERT_NE(family, nullptr) << name;
    EXPECT_EQ(family->name(), "elementwise");
    EXPECT_EQ(familyFor(schema->id), family) << name;
  }
  for (const char* name :
       {"matmul", "reshape", "transpose", "sum", "softmax", "identity", "contiguous", "zeros", "concat", "gather"}) {
    const OpSchema* schema = OpRegistry::global().find(name);
    ASSERT_NE(schema, nullptr) << name;
    EXPECT_EQ(elementwiseFamily(schema->id), nullptr) << name;
  }
}

TEST(ElementwiseFamily, RejectedSpecsSayWhy) {
  std::mt19937 rng(11);
  const Tensor f32 = input(DType::Float32, Shape{4, 5}, rng);
  const Tensor i32 = input(DType::Int32, Shape{4, 5}, rng, Domain::Positive);
  const Tensor i64 = input(DType::Int64, Shape{4, 5}, rng, Domain::Positive);
  const Tensor b = input(DType::Bool, Shape{4, 5}, rng);
  struct Case {
    const char* op;
    std::vector<Value> inputs;
    const char* reason;
  };
  const Case cases[] = {
      {"div", {tv(i32), tv(i32)}, "integer div"},
      {"pow", {tv(i64), tv(i64)}, "integer pow"},
      {"sub", {tv(b), tv(b)}, "bool"},
      {"pow", {tv(b), tv(b)}, "bool"},
      {"logical_and", {tv(f32), tv(b)}, "non-bool"},
      {"logical_not", {tv(i32)}, "non-bool"},
      {"neg", {tv(b)}, "bool"},
      {"exp", {Value::fromFloat(1.5)}, "scalar"},
      {"add", {Value::fromFloat(1.0), Value::fromInt(2)}, "every operand is a scalar"},
      {"where", {Value::fromBool(true), tv(f32), tv(f32)}, "scalar condition"},
      {"where", {tv(b), Value::fromFloat(1.0), Value::fromFloat(2.0)}, "two scalar values"},
      {"add_n",
       {tv(f32), Value::fromFloat(1), Value::fromFloat(2), Value::fromFloat(3), Value::fromFloat(4)},
       "scalar operands"},
  };
  for (const Case& c : cases) {
    const KernelSpec spec = specFor(c.op, c.inputs);
    const KernelFamily* family = familyFor(spec.op);
    ASSERT_NE(family, nullptr) << c.op;
    Status status = family->supports(spec);
    ASSERT_FALSE(status.isOk()) << c.op << " " << spec.signature() << " should be rejected";
    EXPECT_EQ(status.code(), ErrorCode::Unsupported) << status.toString();
    EXPECT_NE(status.message().find(c.reason), std::string::npos)
        << c.op << ": '" << c.reason << "' missing from: " << status.message();
    // compileKernel reports the same reason.
    auto compiled = compileKernel(sharedBackend(), *family, spec);
    ASSERT_FALSE(compiled.hasValue());
    EXPECT_NE(compiled.status().message().find(c.reason), std::string::npos) << compiled.status().toString();
  }
}

TEST(ElementwiseFamily, SymbolStemsAreReadable) {
  std::mt19937 rng(12);
  const Tensor a = input(DType::Float32, Shape{4, 256}, rng);
  KernelSpec spec = specFor("add", {tv(a), tv(a)});
  spec.inputs[0].dims[0] = DimSpec{};
  spec.inputs[1].dims[0] = DimSpec{};
  const KernelFamily* family = familyFor(spec.op);
  EXPECT_EQ(family->symbolStem(spec), "add_f32_xdyn_x256");
  const Tensor h = input(DType::Float16, Shape{7, 65}, rng);
  const Tensor row = input(DType::Float16, Shape{65}, rng);
  EXPECT_EQ(family->symbolStem(specFor("mul", {tv(h), tv(row)})), "mul_f16_x7_x65_bcast");
  const Tensor t = input(DType::Float32, Shape{3, 5}, rng, Domain::Normal, Layout::Transposed);
  EXPECT_EQ(
      family->symbolStem(specFor("cast", {tv(t)}, {{"dtype", AttrValue::ofDType(DType::BFloat16)}}, Dims::Symbolic)),
      "cast_f32_to_bf16_xdyn_xdyn_strided");
  const Tensor c = input(DType::Bool, Shape{4, 1}, rng);
  EXPECT_EQ(family->symbolStem(specFor("where", {tv(c), tv(a), Value::fromFloat(0.0)})),
            "where_bool_f32_x4_x256_scalar_bcast");
  EXPECT_EQ(family->symbolStem(specFor("mul", {tv(a), Value::fromFloat(0.5)})), "mul_f32_x4_x256_scalar");
}

// ---- binary ops ----

// One symbolic rank-2 kernel per (op, dtype), run on same-shape, odd, large, row-, column- and
// two-sided broadcasts (the flat path and every inner-loop variant of the nested one).
TEST(ElementwiseBinary, FloatOpsSymbolicAllDTypesManyShapes) {
  std::mt19937 rng(21);
  const ShapePair shapes[] = {
      {Shape{7, 17}, Shape{7, 17}},     {Shape{1, 1}, Shape{1, 1}},    {Shape{63, 65}, Shape{63, 65}},
      {Shape{3, 1000}, Shape{3, 1000}}, {Shape{63, 65}, Shape{1, 65}}, {Shape{63, 65}, Shape{63, 1}},
      {Shape{1, 65}, Shape{63, 1}},     {Shape{17, 1}, Shape{1, 1}},   {Shape{1, 7}, Shape{33, 7}},
      {Shape{0, 5}, Shape{1, 5}},
  };
  for (DType dtype : kFloatTypes) {
    for (const char* op : kBinaryFloatOps) {
      const std::vector<Value> first = {tv(input(dtype, shapes[0].first, rng, domainFor(op, 0))),
                                        tv(input(dtype, shapes[0].second, rng, domainFor(op, 1)))};
      Kernel kernel(specFor(op, first, {}, Dims::Symbolic));
      ASSERT_TRUE(kernel.ok());
      for (const ShapePair& pair : shapes) {
        const std::vector<Value> inputs = {tv(input(dtype, pair.first, rng, domainFor(op, 0))),
                                           tv(input(dtype, pair.second, rng, domainFor(op, 1)))};
        EXPECT_TRUE(kernel.matches(inputs)) << op << " " << dtypeName(dtype);
      }
    }
  }
}

// Static specs: dims, strides and the path are baked in (same shape: the flat loop only;
// broadcast and rank mismatch: a nest with constant strides).
TEST(ElementwiseBinary, FloatOpsStaticSpecs) {
  std::mt19937 rng(22);
  const ShapePair shapes[] = {{Shape{7, 65}, Shape{7, 65}}, {Shape{17, 33}, Shape{33}}, {Shape{9, 1}, Shape{1, 1003}}};
  for (DType dtype : kFloatTypes) {
    for (const char* op : kBinaryFloatOps) {
      if (dtype != DType::Float32 && std::string_view(op) != "add" && std::string_view(op) != "div" &&
          std::string_view(op) != "pow" && std::string_view(op) != "maximum" && std::string_view(op) != "less_equal") {
        continue;
      }
      for (const ShapePair& pair : shapes) {
        const std::vector<Value> inputs = {tv(input(dtype, pair.first, rng, domainFor(op, 0))),
                                           tv(input(dtype, pair.second, rng, domainFor(op, 1)))};
        Kernel kernel(specFor(op, inputs));
        ASSERT_TRUE(kernel.ok());
        EXPECT_TRUE(kernel.matches(inputs)) << op << " " << dtypeName(dtype);
        // A second, fresh draw through the same kernel.
        const std::vector<Value> again = {tv(input(dtype, pair.first, rng, domainFor(op, 0))),
                                          tv(input(dtype, pair.second, rng, domainFor(op, 1)))};
        EXPECT_TRUE(kernel.matches(again)) << op << " " << dtypeName(dtype);
      }
    }
  }
}

TEST(ElementwiseBinary, NonContiguousInputs) {
  std::mt19937 rng(23);
  struct LayoutPair {
    Layout a, b;
  };
  const LayoutPair layouts[] = {{Layout::Transposed, Layout::Contiguous},
                                {Layout::Strided, Layout::Transposed},
                                {Layout::Contiguous, Layout::Strided}};
  const ShapePair shapes[] = {
      {Shape{7, 65}, Shape{7, 65}}, {Shape{33, 17}, Shape{33, 17}}, {Shape{5, 1000}, Shape{5, 1000}}};
  for (DType dtype : kFloatTypes) {
    for (const char* op : {"add", "mul", "maximum", "greater", "div"}) {
      if (dtype != DType::Float32 && std::string_view(op) != "add" && std::string_view(op) != "mul") continue;
      for (const LayoutPair& layout : layouts) {
        auto make = [&](const ShapePair& pair) {
          return std::vector<Value>{tv(input(dtype, pair.first, rng, domainFor(op, 0), layout.a)),
                                    tv(input(dtype, pair.second, rng, domainFor(op, 1), layout.b))};
        };
        Kernel symbolic(specFor(op, make(shapes[0]), {}, Dims::Symbolic));
        for (const ShapePair& pair : shapes) EXPECT_TRUE(symbolic.matches(make(pair))) << op;
        if (&layout != &layouts[0]) continue;
        const std::vector<Value> inputs = make(shapes[1]);
        Kernel fixed(specFor(op, inputs));
        EXPECT_TRUE(fixed.matches(inputs)) << op;
      }
    }
  }
  // Non-contiguous and broadcast together, rank 3.
  for (DType dtype : kFloatTypes) {
    const std::vector<Value> inputs = {tv(input(dtype, Shape{4, 9, 13}, rng, Domain::Normal, Layout::Transposed)),
                                       tv(input(dtype, Shape{9, 1}, rng, Domain::Normal, Layout::Strided))};
    Kernel symbolic(specFor("sub", inputs, {}, Dims::Symbolic));
    EXPECT_TRUE(symbolic.matches(inputs));
    EXPECT_TRUE(symbolic.matches({tv(input(dtype, Shape{2, 1, 65}, rng, Domain::Normal, Layout::Transposed)),
                                  tv(input(dtype, Shape{7, 65}, rng, Domain::Normal, Layout::Strided))}));
    Kernel fixed(specFor("sub", inputs));
    EXPECT_TRUE(fixed.matches(inputs));
  }
}

// Negative strides (a reversed slice view) and a broadcast operand on top.
TEST(ElementwiseBinary, ReversedViews) {
  std::mt19937 rng(20);
  for (DType dtype : kFloatTypes) {
    auto reversed = [&](const Shape& shape) {
      const Tensor x = input(dtype, shape, rng);
      Tensor view = shapevm::testing::run1(
          "slice",
          {tv(x), shapevm::testing::ints({-1}), shapevm::testing::ints({-(shape[shape.rank() - 1] + 1)}),
           shapevm::testing::ints({-1})},
          {{"axes", AttrValue::ofInts({shape.rank() - 1})}});
      EXPECT_LT(view.stride(view.rank() - 1), 0);
      return tv(view);
    };
    const std::vector<Value> inputs = {reversed(Shape{7, 65}), tv(input(dtype, Shape{65}, rng))};
    Kernel symbolic(specFor("mul", inputs, {}, Dims::Symbolic));
    EXPECT_TRUE(symbolic.matches(inputs)) << dtypeName(dtype);
    EXPECT_TRUE(symbolic.matches({reversed(Shape{3, 1003}), tv(input(dtype, Shape{1}, rng))})) << dtypeName(dtype);
    Kernel fixed(specFor("mul", inputs));
    EXPECT_TRUE(fixed.matches(inputs)) << dtypeName(dtype);
    const std::vector<Value> unary = {reversed(Shape{5, 33})};
    Kernel tanh(specFor("tanh", unary, {}, Dims::Symbolic));
    EXPECT_TRUE(tanh.matches(unary)) << dtypeName(dtype);
  }
}

TEST(ElementwiseBinary, BroadcastingAcrossRanksUpTo8) {
  std::mt19937 rng(24);
  const ShapePair shapes[] = {
      {Shape{5, 7}, Shape{7}},
      {Shape{1}, Shape{5, 7}},
      {Shape{}, Shape{5, 7}},
      {Shape{}, Shape{}},
      {Shape{1003}, Shape{1}},
      {Shape{2, 1, 3}, Shape{4, 1}},
      {Shape{3, 1, 4, 1, 5}, Shape{1, 2, 1, 6, 1}},
      {Shape{2, 1, 3, 1, 2, 1, 3, 2}, Shape{3, 1, 2, 1, 1, 2}},
      {Shape{2, 3, 1, 2, 2, 1, 3, 17}, Shape{2, 3, 4, 2, 2, 5, 3, 17}},
  };
  for (const ShapePair& pair : shapes) {
    for (DType dtype : kFloatTypes) {
      const char* op = dtype == DType::Float32 ? "add" : dtype == DType::Float16 ? "mul" : "minimum";
      const std::vector<Value> inputs = {tv(input(dtype, pair.first, rng, domainFor(op, 0))),
                                         tv(input(dtype, pair.second, rng, domainFor(op, 1)))};
      Kernel fixed(specFor(op, inputs));
      EXPECT_TRUE(fixed.matches(inputs)) << op << " " << pair.first.toString() << " " << pair.second.toString();
      Kernel symbolic(specFor(op, inputs, {}, Dims::Symbolic));
      EXPECT_TRUE(symbolic.matches(inputs)) << op << " " << pair.first.toString() << " " << pair.second.toString();
      if (dtype == DType::Float32) {  // reversed operand order through a fresh kernel
        const std::vector<Value> reversed = {inputs[1], inputs[0]};
        Kernel swapped(specFor(op, reversed, {}, Dims::Symbolic));
        EXPECT_TRUE(swapped.matches(reversed)) << op;
      }
    }
  }
}

TEST(ElementwiseBinary, ScalarOperandsAreWeak) {
  std::mt19937 rng(25);
  struct Case {
    const char* op;
    DType dtype;
    Value scalar;
    bool scalar_first;
    Domain domain;
  };
  const Case cases[] = {
      {"mul", DType::Float32, Value::fromFloat(0.5), false, Domain::Normal},
      {"mul", DType::Float16, Value::fromFloat(0.1), true, Domain::Normal},  // 0.1 rounds to float16 first
      {"add", DType::BFloat16, Value::fromInt(2), false, Domain::Normal},
      {"sub", DType::Float64, Value::fromFloat(3.25), true, Domain::Normal},
      {"div", DType::Float32, Value::fromFloat(3.0), false, Domain::Normal},
      {"div", DType::Float16, Value::fromFloat(3.0), true, Domain::NonZero},
      {"pow", DType::Float32, Value::fromFloat(2.0), false, Domain::Positive},
      {"pow", DType::BFloat16, Value::fromFloat(0.5), false, Domain::Positive},
      {"maximum", DType::Float32, Value::fromFloat(0.0), false, Domain::Coarse},
      {"minimum", DType::BFloat16, Value::fromFloat(0.5), true, Domain::Coarse},
      {"less", DType::Float16, Value::fromFloat(0.25), false, Domain::Normal},
      {"greater_equal", DType::Float32, Value::fromInt(1), true, Domain::Coarse},
      {"add", DType::Int32, Value::fromInt(5), false, Domain::Normal},
      {"mul", DType::Int64, Value::fromInt(-3), true, Domain::Normal},
      {"greater", DType::Int32, Value::fromInt(2), false, Domain::Coarse},
      {"logical_and", DType::Bool, Value::fromBool(true), false, Domain::Normal},
      {"add", DType::Bool, Value::fromBool(false), true, Domain::Normal},
  };
  for (const Case& c : cases) {
    for (const Shape& shape : {Shape{7, 65}, Shape{1003}, Shape{}}) {
      const Value x = tv(input(c.dtype, shape, rng, c.domain));
      const std::vector<Value> inputs =
          c.scalar_first ? std::vector<Value>{c.scalar, x} : std::vector<Value>{x, c.scalar};
      Kernel fixed(specFor(c.op, inputs));
      EXPECT_TRUE(fixed.matches(inputs)) << c.op << " " << dtypeName(c.dtype);
      Kernel symbolic(specFor(c.op, inputs, {}, Dims::Symbolic));
      EXPECT_TRUE(symbolic.matches(inputs)) << c.op << " " << dtypeName(c.dtype);
    }
  }
}

// A kernel compiled for an int scalar next to an int32 tensor declines a float scalar (the
// reference would promote to float32), instead of computing the wrong dtype.
TEST(ElementwiseBinary, ScalarOfAnotherKindDeclines) {
  std::mt19937 rng(26);
  const Value x = tv(input(DType::Int32, Shape{5, 7}, rng));
  Kernel kernel(specFor("add", {x, Value::fromInt(2)}, {}, Dims::Symbolic));
  ASSERT_TRUE(kernel.ok());
  EXPECT_TRUE(kernel.matches({x, Value::fromInt(-7)}));
  std::vector<Value> out;
  Status status = kernel.run({x, Value::fromFloat(2.5)}, out);
  ASSERT_FALSE(status.isOk());
  EXPECT_NE(status.message().find("scalar"), std::string::npos) << status.toString();
  // float tensors take any scalar kind as their own dtype: int, float and bool all run.
  const Value f = tv(input(DType::Float16, Shape{9}, rng));
  Kernel float_kernel(specFor("mul", {f, Value::fromFloat(1.5)}, {}, Dims::Symbolic));
  EXPECT_TRUE(float_kernel.matches({f, Value::fromInt(3)}));
  EXPECT_TRUE(float_kernel.matches({f, Value::fromBool(true)}));
  EXPECT_TRUE(float_kernel.matches({f, Value::fromFloat(-0.3)}));
}

TEST(ElementwiseBinary, IntegerOpsWrapLikeTheReference) {
  std::mt19937 rng(27);
  const char* const ops[] = {"add",       "sub",  "mul",        "maximum", "minimum",      "equal",
                             "not_equal", "less", "less_equal", "greater", "greater_equal"};
  for (DType dtype : {DType::Int32, DType::Int64}) {
    for (const char* op : ops) {
      const Domain domain = domainFor(op, 0) == Domain::Coarse ? Domain::Coarse : Domain::Normal;
      const std::vector<Value> inputs = {tv(input(dtype, Shape{9, 33}, rng, domain)),
                                         tv(input(dtype, Shape{33}, rng, domain))};
      Kernel kernel(specFor(op, inputs, {}, Dims::Symbolic));
      EXPECT_TRUE(kernel.matches(inputs)) << op << " " << dtypeName(dtype);
      EXPECT_TRUE(
          kernel.matches({tv(input(dtype, Shape{4, 1003}, rng, domain)), tv(input(dtype, Shape{1003}, rng, domain))}))
          << op;
    }
    // Two's complement wrap at the range ends.
    Tensor a = Tensor::empty(dtype, Shape{6}).value();
    Tensor b = Tensor::empty(dtype, Shape{6}).value();
    const std::int64_t lo = dtype == DType::Int32 ? INT32_MIN : INT64_MIN;
    const std::int64_t hi = dtype == DType::Int32 ? INT32_MAX : INT64_MAX;
    const std::int64_t av[] = {hi, lo, hi, lo, -1, hi};
    const std::int64_t bv[] = {1, -1, hi, lo, lo, -1};
    for (int i = 0; i < 6; ++i) {
      if (dtype == DType::Int32) {
        a.data<std::int32_t>()[i] = static_cast<std::int32_t>(av[i]);
        b.data<std::int32_t>()[i] = static_cast<std::int32_t>(bv[i]);
      } else {
        a.data<std::int64_t>()[i] = av[i];
        b.data<std::int64_t>()[i] = bv[i];
      }
    }
    for (const char* op : {"add", "sub", "mul"}) {
      Kernel kernel(specFor(op, {tv(a), tv(b)}));
      EXPECT_TRUE(kernel.matchesWithNaN({tv(a), tv(b)})) << op << " " << dtypeName(dtype);
    }
  }
}

TEST(ElementwiseBinary, BoolOps) {
  std::mt19937 rng(28);
  const char* const ops[] = {"add",  "mul",        "maximum", "minimum",       "equal",       "not_equal",
                             "less", "less_equal", "greater", "greater_equal", "logical_and", "logical_or"};
  for (const char* op : ops) {
    const std::vector<Value> inputs = {tv(input(DType::Bool, Shape{5, 65}, rng)),
                                       tv(input(DType::Bool, Shape{5, 1}, rng))};
    Kernel kernel(specFor(op, inputs, {}, Dims::Symbolic));
    EXPECT_TRUE(kernel.matches(inputs)) << op;
    EXPECT_TRUE(kernel.matches({tv(input(DType::Bool, Shape{3, 7}, rng)), tv(input(DType::Bool, Shape{3, 7}, rng))}))
        << op;
  }
}

TEST(ElementwiseBinary, MixedDTypesPromoteLikeTheReference) {
  std::mt19937 rng(29);
  struct Case {
    const char* op;
    DType a, b;
  };
  const Case cases[] = {
      {"add", DType::Float16, DType::BFloat16},  // -> float32
      {"mul", DType::Int32, DType::Float16},     // -> float16, ints rounded to float16 first
      {"sub", DType::Float32, DType::Float64},   // -> float64
      {"less", DType::Int32, DType::Float64},    // -> bool
      {"add", DType::Bool, DType::Int64},        // -> int64
      {"maximum", DType::BFloat16, DType::Int64}, {"add", DType::Int32, DType::Int64},
      {"div", DType::Int64, DType::Float32},      {"equal", DType::Float16, DType::Float32},
  };
  for (const Case& c : cases) {
    const std::vector<Value> inputs = {
        tv(input(c.a, Shape{7, 65}, rng, Domain::WideInt)),
        tv(input(c.b, Shape{65}, rng, std::string_view(c.op) == "div" ? Domain::NonZero : Domain::WideInt))};
    Kernel symbolic(specFor(c.op, inputs, {}, Dims::Symbolic));
    EXPECT_TRUE(symbolic.matches(inputs)) << c.op << " " << dtypeName(c.a) << " " << dtypeName(c.b);
    Kernel fixed(specFor(c.op, inputs));
    EXPECT_TRUE(fixed.matches(inputs)) << c.op << " " << dtypeName(c.a) << " " << dtypeName(c.b);
  }
}

// ---- unary ops ----

TEST(ElementwiseUnary, FloatOpsSymbolicAllDTypes) {
  std::mt19937 rng(31);
  const Shape shapes[] = {Shape{7, 17}, Shape{1, 1}, Shape{63, 65}, Shape{3, 1000}, Shape{1, 1003}, Shape{0, 3}};
  for (DType dtype : kFloatTypes) {
    for (const char* op : kUnaryFloatOps) {
      Kernel kernel(specFor(op, {tv(input(dtype, shapes[0], rng, domainFor(op, 0)))}, {}, Dims::Symbolic));
      ASSERT_TRUE(kernel.ok());
      for (const Shape& shape : shapes) {
        EXPECT_TRUE(kernel.matches({tv(input(dtype, shape, rng, domainFor(op, 0)))})) << op << " " << dtypeName(dtype);
      }
      // Wider arguments: the tails of exp/sigmoid/tanh/erf/gelu/silu.
      if (domainFor(op, 0) == Domain::Normal) {
        EXPECT_TRUE(kernel.matches({tv(input(dtype, Shape{9, 1001}, rng, Domain::Wide))}))
            << op << " " << dtypeName(dtype);
      }
    }
  }
}

// float16 exp, sigmoid and tanh are the float32 functions rounded once, so they round like the
// reference (the correctly rounded float32 value, rounded to float16) at almost every element. The
// 16-bit variants (bfloat16 only, codegen_math.h sixteenBitMathFor) land an ulp off at many
// elements in float16 (their 2^-13 is a quarter to a half of float16's rounding error); a fused
// chain that cancels afterwards then fails validation (FusionTest's views chain, float16, n = 1).
TEST(ElementwiseUnary, Float16TranscendentalsRoundLikeTheReference) {
  std::mt19937 rng(35);
  for (const char* op : {"exp", "sigmoid", "tanh"}) {
    const Tensor x = input(DType::Float16, Shape{64, 1024}, rng, Domain::Normal);
    Kernel kernel(specFor(op, {tv(x)}, {}, Dims::Symbolic));
    ASSERT_TRUE(kernel.ok());
    auto expected = referenceOutputs(specFor(op, {tv(x)}, {}, Dims::Symbolic), {tv(x)});
    ASSERT_TRUE(static_cast<bool>(expected)) << expected.status().toString();
    std::vector<Value> actual;
    ASSERT_TRUE(kernel.run({tv(x)}, actual).isOk());
    const Tensor& want = (*expected)[0].tensor();
    const Tensor& got = actual[0].tensor();
    std::int64_t different = 0;
    for (std::int64_t i = 0; i < want.numel(); ++i) different += want.elementAsDouble(i) != got.elementAsDouble(i);
    // Measured (AMD Zen 5): 0 of 65,536 with the float32 functions, 63-142 with the 16-bit variants.
    EXPECT_LE(different, want.numel() / 4096)
        << op << ": " << different << " of " << want.numel() << " elements round differently from the reference";
  }
}

TEST(ElementwiseUnary, FloatOpsNonContiguousAndStatic) {
  std::mt19937 rng(32);
  for (DType dtype : kFloatTypes) {
    for (const char* op : kUnaryFloatOps) {
      const bool all_layouts = dtype == DType::Float32 || std::string_view(op) == "exp" ||
                               std::string_view(op) == "gelu" || std::string_view(op) == "relu";
      if (!all_layouts) continue;
      for (Layout layout : {Layout::Transposed, Layout::Strided}) {
        Kernel kernel(specFor(op, {tv(input(dtype, Shape{7, 17}, rng, domainFor(op, 0), layout))}, {}, Dims::Symbolic));
        for (const Shape& shape : {Shape{7, 17}, Shape{65, 33}, Shape{2, 1001}}) {
          EXPECT_TRUE(kernel.matches({tv(input(dtype, shape, rng, domainFor(op, 0), layout))})) << op;
        }
      }
      const std::vector<Value> inputs = {tv(input(dtype, Shape{5, 1003}, rng, domainFor(op, 0)))};
      Kernel fixed(specFor(op, inputs));
      EXPECT_TRUE(fixed.matches(inputs)) << op << " " << dtypeName(dtype);
      const std::vector<Value> strided = {tv(input(dtype, Shape{4, 3, 7}, rng, domainFor(op, 0), Layout::Strided))};
      Kernel fixed_strided(specFor(op, strided));
      EXPECT_TRUE(fixed_strided.matches(strided)) << op << " " << dtypeName(dtype);
    }
  }
}

TEST(ElementwiseUnary, Float64MatchesExactly) {
  std::mt19937 rng(33);
  for (const char* op : kUnaryFloatOps) {
    const std::vector<Value> inputs = {tv(input(DType::Float64, Shape{1003}, rng, domainFor(op, 0)))};
    Kernel kernel(specFor(op, inputs, {}, Dims::Symbolic));
    EXPECT_TRUE(kernel.matchesWithNaN(inputs)) << op;  // bit-exact: same libm calls and formulas
    EXPECT_TRUE(kernel.matchesWithNaN({tv(input(DType::Float64, Shape{17}, rng, domainFor(op, 0)))})) << op;
    const std::vector<Value> strided = {tv(input(DType::Float64, Shape{9, 5}, rng, domainFor(op, 0), Layout::Strided))};
    Kernel fixed(specFor(op, strided));
    EXPECT_TRUE(fixed.matchesWithNaN(strided)) << op;
  }
}

TEST(ElementwiseUnary, IntegerAndBoolInputs) {
  std::mt19937 rng(34);
  // Float math on integers computes in float32 (the reference casts first).
  for (DType dtype : {DType::Int32, DType::Int64, DType::Bool}) {
    for (const char* op : {"exp", "sqrt", "log", "sigmoid", "tanh", "gelu", "erf", "silu", "rsqrt"}) {
      const std::vector<Value> inputs = {tv(
          input(dtype, Shape{7, 33}, rng, domainFor(op, 0) == Domain::Positive ? Domain::Positive : Domain::Coarse))};
      if (dtype == DType::Bool && domainFor(op, 0) == Domain::Positive) continue;  // log(0) = -inf, rsqrt(0) = inf
      Kernel kernel(specFor(op, inputs, {}, Dims::Symbolic));
      EXPECT_TRUE(kernel.matches(inputs)) << op << " " << dtypeName(dtype);
    }
  }
  for (DType dtype : {DType::Int32, DType::Int64}) {
    Tensor x = input(dtype, Shape{37}, rng);
    storeFromDouble(x.rawData(), dtype, 0, dtype == DType::Int32 ? -2147483648.0 : -9223372036854775808.0);
    for (const char* op : {"neg", "abs", "relu"}) {
      Kernel kernel(specFor(op, {tv(x)}, {}, Dims::Symbolic));
      EXPECT_TRUE(kernel.matches({tv(x)})) << op << " " << dtypeName(dtype);
    }
  }
  for (const char* op : {"abs", "relu", "logical_not"}) {
    const std::vector<Value> inputs = {tv(input(DType::Bool, Shape{5, 65}, rng))};
    Kernel kernel(specFor(op, inputs, {}, Dims::Symbolic));
    EXPECT_TRUE(kernel.matches(inputs)) << op;
    const std::vector<Value> strided = {tv(input(DType::Bool, Shape{5, 65}, rng, Domain::Normal, Layout::Strided))};
    Kernel strided_kernel(specFor(op, strided));
    EXPECT_TRUE(strided_kernel.matches(strided)) << op;
  }
}

// ---- where, cast, add_n ----

TEST(ElementwiseWhere, BroadcastsAllThreeOperands) {
  std::mt19937 rng(41);
  for (DType dtype : {DType::Float32, DType::Float16, DType::BFloat16, DType::Float64, DType::Int32, DType::Bool}) {
    const std::vector<Value> inputs = {tv(input(DType::Bool, Shape{9, 1}, rng)), tv(input(dtype, Shape{9, 65}, rng)),
                                       tv(input(dtype, Shape{65}, rng))};
    Kernel symbolic(specFor("where", inputs, {}, Dims::Symbolic));
    EXPECT_TRUE(symbolic.matches(inputs)) << dtypeName(dtype);
    EXPECT_TRUE(symbolic.matches({tv(input(DType::Bool, Shape{3, 1003}, rng)), tv(input(dtype, Shape{3, 1003}, rng)),
                                  tv(input(dtype, Shape{1}, rng))}))
        << dtypeName(dtype);
    EXPECT_TRUE(symbolic.matches({tv(input(DType::Bool, Shape{1, 7}, rng)), tv(input(dtype, Shape{5, 1}, rng)),
                                  tv(input(dtype, Shape{7}, rng))}))
        << dtypeName(dtype);
    Kernel fixed(specFor("where", inputs));
    EXPECT_TRUE(fixed.matches(inputs)) << dtypeName(dtype);
  }
  // A float condition counts nonzero (NaN too) as true; values of different dtypes promote.
  Tensor cond = input(DType::Float32, Shape{4, 17}, rng, Domain::Coarse);
  storeFromDouble(cond.rawData(), DType::Float32, 3, std::numeric_limits<double>::quiet_NaN());
  const std::vector<Value> mixed = {tv(cond), tv(input(DType::Float16, Shape{4, 17}, rng)),
                                    tv(input(DType::Float32, Shape{17}, rng, Domain::Normal))};
  Kernel mixed_kernel(specFor("where", mixed));
  EXPECT_TRUE(mixed_kernel.matches(mixed));
  const std::vector<Value> ints = {tv(input(DType::Bool, Shape{33}, rng)),
                                   tv(input(DType::Int32, Shape{33}, rng, Domain::WideInt)),
                                   tv(input(DType::Float16, Shape{33}, rng))};
  Kernel int_kernel(specFor("where", ints, {}, Dims::Symbolic));
  EXPECT_TRUE(int_kernel.matches(ints));
  // Strided operands and scalar values.
  const std::vector<Value> strided = {tv(input(DType::Bool, Shape{6, 13}, rng, Domain::Normal, Layout::Transposed)),
                                      tv(input(DType::BFloat16, Shape{6, 13}, rng, Domain::Normal, Layout::Strided)),
                                      Value::fromFloat(0.0)};
  Kernel strided_kernel(specFor("where", strided, {}, Dims::Symbolic));
  EXPECT_TRUE(strided_kernel.matches(strided));
  const std::vector<Value> scalar_a = {tv(input(DType::Bool, Shape{5, 7}, rng)), Value::fromFloat(-1.5),
                                       tv(input(DType::Float16, Shape{7}, rng))};
  Kernel scalar_kernel(specFor("where", scalar_a));
  EXPECT_TRUE(scalar_kernel.matches(scalar_a));
}

TEST(ElementwiseCast, EveryDTypePair) {
  std::mt19937 rng(42);
  const DType all[] = {DType::Float32, DType::Float16, DType::BFloat16, DType::Float64,
                       DType::Int32,   DType::Int64,   DType::Bool};
  for (DType from : all) {
    for (DType to : all) {
      const Attrs attrs = {{"dtype", AttrValue::ofDType(to)}};
      const std::vector<Value> inputs = {tv(input(from, Shape{5, 37}, rng, Domain::CastRange))};
      Kernel symbolic(specFor("cast", inputs, attrs, Dims::Symbolic));
      EXPECT_TRUE(symbolic.matches(inputs)) << dtypeName(from) << " -> " << dtypeName(to);
      EXPECT_TRUE(symbolic.matches({tv(input(from, Shape{1, 1003}, rng, Domain::CastRange))}))
          << dtypeName(from) << " -> " << dtypeName(to);
      const std::vector<Value> strided = {tv(input(from, Shape{3, 9}, rng, Domain::CastRange, Layout::Strided))};
      Kernel fixed(specFor("cast", strided, attrs));
      EXPECT_TRUE(fixed.matches(strided)) << dtypeName(from) << " -> " << dtypeName(to);
    }
  }
}

TEST(ElementwiseAddN, FoldsWithPromotionAndRounding) {
  std::mt19937 rng(43);
  const std::vector<std::vector<Value>> cases = {
      {tv(input(DType::Float32, Shape{5, 7}, rng))},
      {tv(input(DType::Float32, Shape{5, 7}, rng)), tv(input(DType::Float32, Shape{7}, rng)),
       tv(input(DType::Float32, Shape{5, 1}, rng))},
      {tv(input(DType::Float16, Shape{33, 65}, rng)), tv(input(DType::Float16, Shape{33, 65}, rng)),
       tv(input(DType::Float16, Shape{65}, rng)), tv(input(DType::Float16, Shape{33, 1}, rng)),
       tv(input(DType::Float16, Shape{1}, rng))},
      {tv(input(DType::BFloat16, Shape{1003}, rng)), tv(input(DType::Float32, Shape{1003}, rng)),
       tv(input(DType::Int32, Shape{1}, rng, Domain::WideInt))},
      {tv(input(DType::Int32, Shape{9}, rng, Domain::WideInt)), tv(input(DType::Float16, Shape{9}, rng)),
       Value::fromInt(3)},
      {tv(input(DType::Float32, Shape{4, 6}, rng, Domain::Normal, Layout::Transposed)),
       tv(input(DType::Float32, Shape{4, 6}, rng, Domain::Normal, Layout::Strided))},
  };
  for (const std::vector<Value>& inputs : cases) {
    Kernel fixed(specFor("add_n", inputs));
    EXPECT_TRUE(fixed.matches(inputs));
    Kernel symbolic(specFor("add_n", inputs, {}, Dims::Symbolic));
    EXPECT_TRUE(symbolic.matches(inputs));
  }
}

// ---- NaN, inf, signed zero ----

Tensor fromValues(DType dtype, const std::vector<double>& values) {
  Tensor t = Tensor::empty(dtype, Shape{static_cast<std::int64_t>(values.size())}).value();
  for (std::size_t i = 0; i < values.size(); ++i)
    storeFromDouble(t.rawData(), dtype, static_cast<std::int64_t>(i), values[i]);
  return t;
}

TEST(ElementwiseSpecialValues, NaNInfAndSignedZeroLikeTheReference) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  // Pairs that cover NaN on either side, infinities, signed zeros and ties; padded past one
  // vector width so both the vector body and the remainder see them.
  std::vector<double> a = {nan, 1.0, nan, -0.0, 0.0, inf, -inf, 2.0, -3.0, 1e-40, 0.5, -0.0};
  std::vector<double> b = {1.0, nan, nan, 0.0, -0.0, 1.0, inf, 2.0, -inf, -1e-40, 0.5, -0.0};
  for (int i = 0; i < 27; ++i) {
    a.push_back(a[static_cast<std::size_t>(i) % 12]);
    b.push_back(b[static_cast<std::size_t>(i * 5) % 12]);
  }
  for (DType dtype : {DType::Float32, DType::Float16, DType::BFloat16, DType::Float64}) {
    const std::vector<Value> inputs = {tv(fromValues(dtype, a)), tv(fromValues(dtype, b))};
    const bool half = dtype == DType::Float16 || dtype == DType::BFloat16;
    for (const char* op : {"add", "sub", "mul", "div", "maximum", "minimum", "equal", "not_equal", "less", "less_equal",
                           "greater", "greater_equal", "pow"}) {
      const std::string_view name = op;
      if (half && name != "sub" && name != "div" && name != "maximum" && name != "minimum" && name != "not_equal" &&
          name != "less" && name != "pow") {
        continue;
      }
      Kernel kernel(specFor(op, inputs, {}, Dims::Symbolic));
      EXPECT_TRUE(kernel.matchesWithNaN(inputs)) << op << " " << dtypeName(dtype);
    }
    for (const char* op :
         {"neg", "abs", "relu", "sqrt", "rsqrt", "exp", "log", "tanh", "sigmoid", "erf", "gelu", "silu"}) {
      const std::string_view name = op;
      if (half && name != "neg" && name != "abs" && name != "relu" && name != "sqrt" && name != "log" &&
          name != "gelu") {
        continue;
      }
      Kernel kernel(specFor(op, {inputs[0]}, {}, Dims::Symbolic));
      // The float32 approximations are within 1e-6 of libm (an ulp after float16/bfloat16 rounding);
      // float64 calls libm itself.
      const double rel = dtype == DType::Float64 ? 0.0 : dtype == DType::Float32 ? 1e-6 : toleranceFor(dtype);
      EXPECT_TRUE(kernel.matchesWithNaN({inputs[0]}, rel)) << op << " " << dtypeName(dtype);
    }
    for (DType to : {DType::Int32, DType::Int64, DType::Bool}) {
      Kernel kernel(specFor("cast", {inputs[0]}, {{"dtype", AttrValue::ofDType(to)}}, Dims::Symbolic));
      EXPECT_TRUE(kernel.matchesWithNaN({inputs[0]})) << "cast " << dtypeName(dtype) << " -> " << dtypeName(to);
    }
    const std::vector<Value> where = {tv(fromValues(DType::Bool, std::vector<double>(a.size(), 0.0))), inputs[0],
                                      inputs[1]};
    Kernel where_kernel(specFor("where", where, {}, Dims::Symbolic));
    EXPECT_TRUE(where_kernel.matchesWithNaN(where)) << dtypeName(dtype);
  }
}

// ---- one kernel, many shapes; static kernels decline other shapes ----

TEST(ElementwiseSymbolic, OneKernelServesManyShapes) {
  std::mt19937 rng(51);
  const Shape first = Shape{2, 3, 4};
  Kernel add(specFor("add", {tv(input(DType::Float32, first, rng)), tv(input(DType::Float32, first, rng))}, {},
                     Dims::Symbolic));
  Kernel gelu(specFor("gelu", {tv(input(DType::Float16, first, rng))}, {}, Dims::Symbolic));
  ASSERT_TRUE(add.ok() && gelu.ok());
  const ShapePair shapes[] = {
      {Shape{2, 3, 4}, Shape{2, 3, 4}},    {Shape{1, 1, 1}, Shape{1, 1, 1}},
      {Shape{7, 1, 65}, Shape{1, 17, 65}}, {Shape{3, 5, 1000}, Shape{3, 5, 1000}},
      {Shape{1, 63, 1}, Shape{9, 63, 17}}, {Shape{4, 0, 3}, Shape{4, 1, 3}},
      {Shape{1, 1, 4097}, Shape{1, 1, 1}}, {Shape{2, 2, 65537}, Shape{2, 2, 65537}},
  };
  for (const ShapePair& pair : shapes) {
    EXPECT_TRUE(add.matches({tv(input(DType::Float32, pair.first, rng)), tv(input(DType::Float32, pair.second, rng))}))
        << pair.first.toString() << " + " << pair.second.toString();
    EXPECT_TRUE(gelu.matches({tv(input(DType::Float16, pair.first, rng))})) << pair.first.toString();
  }
}

TEST(ElementwiseStatic, DeclinesInputsOutsideItsSpec) {
  std::mt19937 rng(52);
  const Value a = tv(input(DType::Float32, Shape{7, 65}, rng));
  Kernel kernel(specFor("mul", {a, a}));
  ASSERT_TRUE(kernel.ok());
  std::vector<Value> out;
  const Value other = tv(input(DType::Float32, Shape{7, 66}, rng));
  EXPECT_FALSE(kernel.run({other, other}, out).isOk());
  const Value half = tv(input(DType::Float16, Shape{7, 65}, rng));
  EXPECT_FALSE(kernel.run({half, half}, out).isOk());
  const Value transposed = tv(input(DType::Float32, Shape{7, 65}, rng, Domain::Normal, Layout::Transposed));
  EXPECT_FALSE(kernel.run({transposed, a}, out).isOk());
  EXPECT_TRUE(kernel.matches({a, a}));
}

// The JIT's own validation (NaN-poisoned outputs, fresh random inputs, range ends) passes.
TEST(ElementwiseValidation, PassesTheJitsValidation) {
  std::mt19937 rng(53);
  struct Case {
    const char* op;
    std::vector<Value> inputs;
  };
  const Case cases[] = {
      {"gelu", {tv(input(DType::BFloat16, Shape{33, 65}, rng))}},
      {"div",
       {tv(input(DType::Float16, Shape{9, 17}, rng)), tv(input(DType::Float16, Shape{17}, rng, Domain::NonZero))}},
      {"where",
       {tv(input(DType::Bool, Shape{5, 1}, rng)), tv(input(DType::Float32, Shape{5, 7}, rng)),
        tv(input(DType::Float32, Shape{7}, rng))}},
      {"log", {tv(input(DType::Float32, Shape{1003}, rng, Domain::Positive))}},
  };
  for (const Case& c : cases) {
    KernelSpec spec = specFor(c.op, c.inputs, {}, Dims::Symbolic);
    std::vector<Shape> observed;
    for (const Value& v : c.inputs) observed.push_back(v.tensor().shape());
    // A ranged first dim so validation also runs at the range ends.
    spec.inputs[0].dims[0].lo = 1;
    spec.inputs[0].dims[0].hi = 70;
    Kernel kernel(spec);
    ASSERT_TRUE(kernel.ok());
    const auto sets = validationShapes(spec, observed);
    Status status = validateKernel(kernel.compiled(), sets, 99);
    EXPECT_TRUE(status.isOk()) << c.op << ": " << status.toString();
  }
}

// ---- the plan each compiled kernel keeps (KernelFamily::launchPlan) ----

// A kernel's plan is made once from its own spec: shapes alternating through one symbolic kernel
// (equal and broadcast) all match the reference, a static kernel beside it keeps declining the
// other kernel's shapes, and the planned and unplanned paths give the same output dtype and shape.
TEST(ElementwisePlanCache, AlternatingShapesThroughOneKernelUseNoStalePlan) {
  std::mt19937 rng(53);
  const Value a = tv(input(DType::Float32, Shape{7, 65}, rng));
  Kernel symbolic(specFor("sub", {a, a}, {}, Dims::Symbolic));
  Kernel fixed(specFor("sub", {a, a}));
  ASSERT_TRUE(symbolic.ok() && fixed.ok());
  ASSERT_NE(symbolic.compiled().launch_plan, nullptr);
  ASSERT_NE(fixed.compiled().launch_plan, nullptr);
  const ShapePair shapes[] = {{Shape{7, 65}, Shape{7, 65}}, {Shape{3, 1}, Shape{1, 40}}, {Shape{1, 1}, Shape{1, 1}}};
  for (int round = 0; round < 3; ++round) {
    for (const ShapePair& pair : shapes) {
      const Value x = tv(input(DType::Float32, pair.first, rng));
      const Value y = tv(input(DType::Float32, pair.second, rng));
      EXPECT_TRUE(symbolic.matches({x, y})) << pair.first.toString() << " - " << pair.second.toString();
      std::vector<Value> out;
      const bool fits = pair.first == Shape{7, 65} && pair.second == Shape{7, 65};
      EXPECT_EQ(fixed.run({x, y}, out).isOk(), fits) << pair.first.toString() << " - " << pair.second.toString();
      if (fits) {
        EXPECT_TRUE(fixed.matches({x, y}));
      }
      // The kernel's plan and a plan made now agree on the output.
      const CompiledKernel& kernel = symbolic.compiled();
      const Value* operands[] = {&x, &y};
      DType planned_dtype = DType::Bool, made_dtype = DType::Bool;
      Shape planned_shape, made_shape;
      ASSERT_TRUE(kernel.family
                      ->plannedOutputs(kernel.spec, kernel.launch_plan.get(), operands,
                                       std::span<DType>(&planned_dtype, 1), std::span<Shape>(&planned_shape, 1))
                      .isOk());
      ASSERT_TRUE(
          kernel.family
              ->outputs(kernel.spec, operands, std::span<DType>(&made_dtype, 1), std::span<Shape>(&made_shape, 1))
              .isOk());
      EXPECT_EQ(planned_dtype, made_dtype);
      EXPECT_EQ(planned_shape, made_shape);
      EXPECT_EQ(planned_shape, *broadcastShapes(pair.first, pair.second));
    }
  }
}

}  // namespace
}  // namespace shapevm::jit
