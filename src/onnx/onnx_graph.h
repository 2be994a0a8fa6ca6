// SPDX-License-Identifier: Apache-2.0
// The importer's internal model: what each ONNX value is at import time (a folded constant, a
// tensor register, or a small int64 "shape value" held as scalar registers so shape arithmetic
// stays scalar bytecode) and the GraphEmitter that node handlers (onnx_ops.cc, onnx_recurrent.cc)
// emit through. Invariant: an op whose operands are all constants runs at import (folded) and
// yields a constant; only ops with a runtime operand become CallOp sites.
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "bytecode/builder.h"
#include "shapevm/value.h"

namespace shapevm::onnx_import {

// One element of a shape value: known at import, or an int (bool for comparisons) register.
struct ShapeElem {
  std::optional<std::int64_t> known;
  int reg = -1;
};

struct Val {
  enum class Kind { Missing, Const, Tensor, Shape };
  Kind kind = Kind::Missing;
  Tensor constant;                 // Const
  int reg = -1;                    // Tensor; for Const/Shape the cached materialized tensor register
  std::vector<ShapeElem> elems;    // Shape: the int64 elements
  bool scalar = false;             // Shape: a 0-d value (elems has one entry)
  std::optional<DType> dtype;      // Tensor: when known
  int rank = -1;                   // Tensor: -1 = unknown
  std::vector<std::int64_t> dims;  // Tensor: per dim the static extent or -1 (size rank when known)
  std::string missing_reason;      // Missing: why it cannot be used
  std::string folded_bn;           // Tensor: the output name of the BatchNormalization folded into it

  static Val ofConst(Tensor t);
  static Val ofTensor(int reg, std::optional<DType> dtype = std::nullopt, int rank = -1);
  static Val ofShape(std::vector<ShapeElem> elems, bool scalar = false);
  bool isConst() const { return kind == Kind::Const; }
  bool isShape() const { return kind == Kind::Shape; }
};

// One operand of an emitted op: an import-time Value or a register.
struct Operand {
  bool is_const = false;
  Value constant;
  int reg = -1;
  static Operand of(Value v) {
    Operand o;
    o.is_const = true;
    o.constant = std::move(v);
    return o;
  }
  static Operand ofReg(int r) {
    Operand o;
    o.reg = r;
    return o;
  }
  static Operand none() { return ofReg(-1); }
};

class GraphEmitter {
 public:
  GraphEmitter(ModuleBuilder& module, FunctionBuilder& fn) : module_(module), fn_(fn) {}

  FunctionBuilder& fn() { return fn_; }
  ModuleBuilder& module() { return module_; }
  int newReg() { return next_reg_++; }
  // Registers that hold tensors (op outputs, parameters, tensor constants, carried state): an op
  // site's other operands get the `_` token, so the JIT sees scalars (a loop's step index) as such.
  void markTensor(int reg) { tensor_regs_.insert(reg); }
  int newLoop() { return next_loop_++; }

  // Emits (or, all operands constant, folds) op `name`; returns its outputs.
  Expected<std::vector<Val>> op(std::string_view name, std::vector<Operand> inputs, const NamedAttrs& attrs = {});
  Expected<Val> op1(std::string_view name, std::vector<Operand> inputs, const NamedAttrs& attrs = {});

  // Operand views of a value: as a tensor (shape values are materialized to int64 tensors) or as
  // an `ints` operand (a tuple of ints; a runtime tensor passes as is).
  Expected<Operand> tensor(Val& v, std::string_view what);
  Expected<Operand> ints(Val& v, std::string_view what);
  Operand ints(const std::vector<std::int64_t>& values) { return Operand::of(Value::fromInts(values)); }
  // Register holding the int of a shape element (loads a constant when known).
  int intReg(ShapeElem& e);
  int constReg(int const_index);
  // Register of an operand (LoadConst for constants).
  int regOf(const Operand& o);
  // Register with the tuple of the elements.
  int tupleOf(std::vector<ShapeElem>& elems);
  // Scalar opcode on two elements (folded when both are known).
  ShapeElem scalar(Opcode op, ShapeElem& a, ShapeElem& b);
  ShapeElem dimOf(Val& v, int axis);  // a tensor's extent (known when static)

  // A value's elements as a shape value when it is one or a small int constant of rank <= 1.
  std::optional<std::vector<ShapeElem>> shapeElems(const Val& v) const;
  // shapeElems, or for a runtime int tensor of rank 0 or of rank 1 with a static length, its
  // elements read into int registers (gather + ToInt).
  Expected<std::optional<std::vector<ShapeElem>>> elemsOf(Val& v);

 private:
  ModuleBuilder& module_;
  FunctionBuilder& fn_;
  int next_reg_ = 0;
  std::set<int> tensor_regs_;
  int next_loop_ = 0;
};

// What a node handler sees.
struct NodeCtx {
  const onnx::NodeProto* node = nullptr;
  std::int64_t opset = 0;
  std::vector<Val*> in;  // by input position; nullptr = omitted
  std::vector<Val> out;  // one per node output, filled by the handler
  GraphEmitter* e = nullptr;
  std::string label;  // "node 'name' (Op)" for errors
  // Emits the nodes of a subgraph (an If branch, a Loop body) in the current scope, its inputs
  // bound to `inputs`, and returns its outputs; values the subgraph defines, and registers cached
  // on outer values, do not outlive the call.
  std::function<Expected<std::vector<Val>>(const onnx::GraphProto&, std::vector<Val> inputs)> subgraph;

  // For peephole folds (Conv + BatchNormalization, onnx_conv.cc): the graph being imported and the
  // value of a name produced so far (nullptr when none).
  const onnx::GraphProto* graph = nullptr;
  std::function<const Val*(const std::string&)> lookup;

  bool has(std::size_t k) const { return k < in.size() && in[k] != nullptr; }
  Val& input(std::size_t k) const { return *in[k]; }
  const onnx::AttributeProto* attr(std::string_view name) const;
  std::int64_t attrInt(std::string_view name, std::int64_t fallback) const;
  double attrFloat(std::string_view name, double fallback) const;
  std::string attrString(std::string_view name, std::string fallback) const;
  std::optional<std::vector<std::int64_t>> attrInts(std::string_view name) const;
  // An input that must be known at import (a constant or folded subgraph), as ints.
  Expected<std::vector<std::int64_t>> constInts(std::size_t k, std::string_view what) const;
  template <typename... Args>
  Status fail(ErrorCode code, fmt::format_string<Args...> format, Args&&... args) const {
    return makeError(code, "{}: {}", label, fmt::format(format, std::forward<Args>(args)...));
  }
};

// Helpers the handler files share (onnx_ops.cc): input k as a tensor operand (a missing input is
// an error), emitting op `op` into ctx.out, an ONNX axis made non-negative, a known rank.
Expected<Operand> tensorIn(NodeCtx& ctx, std::size_t k);
Status emitTo(NodeCtx& ctx, std::string_view op, std::vector<Operand> inputs, const NamedAttrs& attrs = {});
int normAxis(std::int64_t axis, int rank);
Status needRank(NodeCtx& ctx, const Val& v, std::string_view what);

using Handler = std::function<Status(NodeCtx&)>;
// The handler for an op type of the default domain, or nullptr (onnx_ops.cc).
const Handler* findHandler(std::string_view op_type);
// Recurrent ops lowered to loops (onnx_recurrent.cc).
Status lowerLstm(NodeCtx& ctx);
Status lowerGru(NodeCtx& ctx);
// Ops composed from existing ShapeVM ops (onnx_composed.cc).
Status handleCumSum(NodeCtx& ctx);
Status handleEinsum(NodeCtx& ctx);
Status handleTopK(NodeCtx& ctx);
// If: a constant condition imports the taken branch only; else both, as bytecode branches.
Status handleIf(NodeCtx& ctx);
// Loop: a counted / conditional bytecode loop over the body; scan outputs grow by concatenation.
Status handleLoop(NodeCtx& ctx);

// The convolution family (onnx_conv.cc).
Status lowerConv(NodeCtx& ctx);
Status lowerConvTranspose(NodeCtx& ctx);
Status lowerMaxPool(NodeCtx& ctx);
Status lowerAveragePool(NodeCtx& ctx);
Status lowerGlobalAveragePool(NodeCtx& ctx);
Status lowerGlobalMaxPool(NodeCtx& ctx);
Status lowerBatchNorm(NodeCtx& ctx);
Status lowerInstanceNorm(NodeCtx& ctx);
Status lowerResize(NodeCtx& ctx);
Status lowerUpsample(NodeCtx& ctx);
Status lowerDepthToSpace(NodeCtx& ctx);
Status lowerSpaceToDepth(NodeCtx& ctx);
// Pad's `mode` attribute as the pad op's code (0 constant, 1 reflect, 2 edge); unknown: an error.
Expected<std::int64_t> padModeCode(const NodeCtx& ctx);
// Before ONNX shape inference (libonnx 1.12 crashes on it): a Conv/ConvTranspose whose declared
// input rank does not fit its weight's rank is an error naming the node and both ranks.
Status checkConvRanks(const onnx::GraphProto& graph, std::string_view model);

std::vector<std::int64_t> intsOfTensor(const Tensor& t);

}  // namespace shapevm::onnx_import
