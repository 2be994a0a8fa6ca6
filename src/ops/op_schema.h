// SPDX-License-Identifier: Apache-2.0
// The op schema: what ops.def says about each op (class, inputs, attributes, dtype rule, output
// shape function, JIT status), parsed once into OpSchema, plus the symbolic shapes the shape
// functions work on. Invariant: every consumer of op knowledge (frontend, verifier, JIT, the
// `shapevm ops --json` listing the Python oracle is checked against) reads it from here.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shapevm/dtype.h"
#include "shapevm/status.h"

namespace shapevm {

enum class OpId : std::uint16_t {
#define SVM_OP(ident, name, cls, inputs, attrs, outputs, dtype_rule, shape_fn, jit, meaning) ident,
#include "ops/ops.def"
#undef SVM_OP
  kCount
};
inline constexpr int kNumOps = static_cast<int>(OpId::kCount);

// What kind of computation an op is (ops.def column 3). Consumers switch over it exhaustively.
enum class OpClass : std::uint8_t {
  Contraction,    // matmul
  Binary,         // elementwise, two operands, numpy broadcasting
  Compare,        // elementwise comparison, bool result
  Unary,          // elementwise, one operand
  Select,         // where(cond, a, b)
  Cast,           // elementwise conversion to the dtype attribute
  Nary,           // elementwise over a variadic input list (add_n)
  View,           // shape and layout change, a view where the layout allows
  Movement,       // copies data into a new layout (concat, stack, gather, pad)
  Reduction,      // reduces axes
  Normalization,  // same shape out, statistics over axes (softmax, layer_norm)
  Copy,           // x itself (identity, contiguous)
  Creation,       // no tensor input
};
std::string_view opClassName(OpClass cls);

// How the result dtype follows from the inputs (ops.def column 7); see resultDType.
enum class DTypeRule : std::uint8_t {
  Same,     // the first tensor input's dtype
  Promote,  // promoteTypes over the tensor inputs
  Bool,     // bool
  Float,    // the input's dtype when floating, else float32 (transcendental math)
  Select,   // promoteTypes of inputs 1 and 2 (where's a and b)
  Attr,     // the `dtype` attribute
  Int64,    // int64 (indices)
  Sum,      // floating inputs keep their dtype, int/bool sum in int64
  Mean,     // floating inputs keep their dtype, int/bool average in float32
};
std::string_view dtypeRuleName(DTypeRule rule);

// What the JIT does with an op (ops.def column 9). `none` (all false) is an explicit decision.
struct JitSupport {
  bool elementwise = false;   // ew: the elementwise kernel family compiles it
  bool reduce = false;        // reduce: the reduction kernel family compiles it
  bool matmul = false;        // matmul: the matmul kernel family compiles it
  bool fuse = false;          // fuse: a node of a fused elementwise program
  bool view = false;          // view: the region planner folds it into a leaf's index map
  bool fused_reduce = false;  // freduce: a fused trailing-axes reduction of a region
  bool norm = false;          // norm: the region planner decomposes it into statistics
  bool conv = false;          // conv: the convolution kernel family compiles it
  bool any() const { return elementwise || reduce || matmul || fuse || view || fused_reduce || norm || conv; }
  std::string toString() const;  // the ops.def spelling, "ew fuse" / "none"
};

enum class InputKind : std::uint8_t { Tensor, Ints, Int, Num };
// The values validation draws for an input (ops.def `@pos` / `@bool`).
enum class InputDomain : std::uint8_t { Any, Positive, Bool };
enum class AttrKind : std::uint8_t { Int, Float, Bool, Ints, DType };
std::string_view attrKindName(AttrKind kind);

struct InputSpec {
  std::string name;
  InputKind kind = InputKind::Tensor;
  bool optional = false;
  bool variadic = false;
  InputDomain domain = InputDomain::Any;
};

struct AttrValue {
  AttrKind kind = AttrKind::Int;
  std::int64_t i = 0;  // Int, Bool (0/1)
  double f = 0.0;      // Float
  DType dtype = DType::Float32;
  std::vector<std::int64_t> ints;

  static AttrValue ofInt(std::int64_t v) {
    AttrValue a;
    a.kind = AttrKind::Int;
    a.i = v;
    return a;
  }
  static AttrValue ofFloat(double v) {
    AttrValue a;
    a.kind = AttrKind::Float;
    a.f = v;
    return a;
  }
  static AttrValue ofBool(bool v) {
    AttrValue a;
    a.kind = AttrKind::Bool;
    a.i = v;
    return a;
  }
  static AttrValue ofInts(std::vector<std::int64_t> v) {
    AttrValue a;
    a.kind = AttrKind::Ints;
    a.ints = std::move(v);
    return a;
  }
  static AttrValue ofDType(DType v) {
    AttrValue a;
    a.kind = AttrKind::DType;
    a.dtype = v;
    return a;
  }
  bool operator==(const AttrValue& other) const;
  std::string toString() const;  // "3", "1e-05", "true", "[0,2,1]", "float32"
};

struct AttrSpec {
  std::string name;
  AttrKind kind = AttrKind::Int;
  std::optional<AttrValue> default_value;  // nullopt = required
};

// ---- symbolic shapes ----

// One dim of a symbolic shape: a static extent, or dynamic (`id` >= 0 names extents known to be
// equal, -1 = anonymous). For an ints input an element is a static value (which may be -1 or
// negative) or dynamic (not known at compile time).
struct SymDim {
  bool is_static = true;
  std::int64_t size = 0;
  std::int32_t id = -1;
  static SymDim fixed(std::int64_t size) {
    SymDim d;
    d.size = size;
    return d;
  }
  static SymDim dynamic(std::int32_t id = -1) {
    SymDim d;
    d.is_static = false;
    d.id = id;
    return d;
  }
  bool operator==(const SymDim& other) const = default;
};

struct SymShape {
  bool rank_known = true;  // false: any rank (`[*]`), dims empty
  std::vector<SymDim> dims;
  static SymShape any() {
    SymShape s;
    s.rank_known = false;
    return s;
  }
  int rank() const { return static_cast<int>(dims.size()); }
  bool operator==(const SymShape& other) const = default;
  std::string toString() const;  // "[2,?3,?]" / "[*]"
};

// What a shape function knows about one input.
struct SymInput {
  enum class Kind : std::uint8_t {
    Tensor,     // `shape` is its shape
    IntScalar,  // an int or bool scalar (a 0-d tensor to elementwise ops; gather drops the axis)
    Scalar,     // a float scalar (a 0-d tensor to elementwise ops)
    Ints,       // a shape operand: `shape` holds its elements (rank_known: its length is known)
    None,       // an omitted optional input
    Other,      // anything not known at compile time
  };
  Kind kind = Kind::Other;
  SymShape shape = SymShape::any();
  static SymInput tensor(SymShape s) { return {Kind::Tensor, std::move(s)}; }
  static SymInput ints(SymShape elements) { return {Kind::Ints, std::move(elements)}; }
  static SymInput of(Kind kind) { return {kind, SymShape::any()}; }
};

struct OpSchema;
struct ShapeArgs {
  const OpSchema* schema = nullptr;
  std::span<const SymInput> inputs;
  std::span<const AttrValue> attrs;  // schema order, defaults filled in (resolveAttrs)
  int output_index = 0;
  int num_outputs = 1;
  const AttrValue* attr(std::string_view name) const;  // nullptr when the op has no such attribute
};
// An output-shape function: the shape of output `output_index`, never wrong but possibly less
// precise than the truth (unknown extents are anonymous dynamic dims, an unknown rank `any`).
using ShapeFn = SymShape (*)(const ShapeArgs& args);

struct OpSchema {
  OpId id;
  std::string_view ident;  // "MatMul"
  std::string_view name;   // "matmul"
  std::string_view meaning;
  OpClass cls = OpClass::Unary;
  std::vector<InputSpec> inputs;
  std::vector<AttrSpec> attrs;
  int num_outputs = 1;  // -1: decided by attributes (see numOutputs)
  DTypeRule dtype_rule = DTypeRule::Same;
  ShapeFn shape_fn = nullptr;
  std::string_view shape_fn_name;  // "shapeBroadcast"
  JitSupport jit;
  int minInputs() const;
  int maxInputs() const;                       // -1 = unbounded
  int attrIndex(std::string_view name) const;  // -1 if absent
};

// The schemas of every ops.def row, in OpId order (OpRegistry copies them).
const std::vector<OpSchema>& opSchemaTable();

// The op's output shape on symbolic inputs: schema.shape_fn, guarded against inputs the schema
// does not allow (returns any).
SymShape inferShape(const OpSchema& schema, std::span<const SymInput> inputs, std::span<const AttrValue> attrs,
                    int output_index = 0, int num_outputs = 1);
// The result dtype for these tensor input dtypes (nullopt entries: non-tensor inputs) by the
// schema's rule; nullopt when the rule needs an input that is missing.
std::optional<DType> resultDType(const OpSchema& schema, std::span<const std::optional<DType>> inputs,
                                 std::span<const AttrValue> attrs);

// The shape functions ops.def names (shape_fns.cc).
SymShape shapeSame(const ShapeArgs& args);
SymShape shapeBroadcast(const ShapeArgs& args);
SymShape shapeMatmul(const ShapeArgs& args);
SymShape shapeReshape(const ShapeArgs& args);
SymShape shapeBroadcastTo(const ShapeArgs& args);
SymShape shapeTranspose(const ShapeArgs& args);
SymShape shapeSqueeze(const ShapeArgs& args);
SymShape shapeUnsqueeze(const ShapeArgs& args);
SymShape shapeSplit(const ShapeArgs& args);
SymShape shapeConcat(const ShapeArgs& args);
SymShape shapeStack(const ShapeArgs& args);
SymShape shapeGather(const ShapeArgs& args);
SymShape shapeReduce(const ShapeArgs& args);
SymShape shapeArgMax(const ShapeArgs& args);
SymShape shapeUnknown(const ShapeArgs& args);
SymShape shapeConv(const ShapeArgs& args);
SymShape shapeConvTranspose(const ShapeArgs& args);
SymShape shapePool(const ShapeArgs& args);
SymShape shapeGlobalPool(const ShapeArgs& args);
SymShape shapeResize(const ShapeArgs& args);
SymShape shapeDepthToSpace(const ShapeArgs& args);  // and space_to_depth (by the schema's name)
SymShape shapePad(const ShapeArgs& args);

// numpy broadcasting of two symbolic shapes; nullopt when it cannot hold (static mismatch) or a
// rank is unknown. Dynamic dims broadcast against 1 keep their id; two different ids give `?`.
std::optional<SymShape> broadcastShapes(const SymShape& a, const SymShape& b);

}  // namespace shapevm
