// SPDX-License-Identifier: Apache-2.0
// Lowering of the AST to the frontend IR: the compile-time value model (Val: register, kind,
// constant, static tuple, shape token), scopes, control flow, op calls. Shared by
// lowering.cc (module, statements, expressions) and lowering_calls.cc (ops, methods, builtins,
// subscripts). Invariant: a Val's register, once set, is never rewritten by later code except
// when it is a named variable's register (those are re-read at each use).
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "frontend/ast.h"
#include "frontend/frontend.h"
#include "frontend/ir.h"

namespace shapevm::frontend {

enum class VKind : std::uint8_t { Unknown, None, Int, Float, Bool, Tensor, Tuple, DType, Str, Namespace };

struct Val {
  VKind kind = VKind::Unknown;
  std::int32_t reg = -1;           // the register holding it (-1: not materialized yet)
  bool is_const = false;           // a compile-time scalar (Int/Float/Bool) or None
  std::int64_t i = 0;
  double f = 0.0;
  bool b = false;
  DType dtype = DType::Float32;    // VKind::DType
  std::string text;                // VKind::Str
  bool static_tuple = false;       // a tuple known item by item
  std::vector<Val> items;
  int tuple_len = -1;              // known length of a non-static tuple
  TensorDescriptor token = TensorDescriptor::anyTensor();  // tensors
  int dim_id = -1;                 // an int that equals dynamic dim ?N of this function

  static Val ofInt(std::int64_t v) { Val x; x.kind = VKind::Int; x.is_const = true; x.i = v; return x; }
  static Val ofFloat(double v) { Val x; x.kind = VKind::Float; x.is_const = true; x.f = v; return x; }
  static Val ofBool(bool v) { Val x; x.kind = VKind::Bool; x.is_const = true; x.b = v; return x; }
  static Val none() { Val x; x.kind = VKind::None; x.is_const = true; return x; }
  static Val reg_of(VKind kind, std::int32_t reg) { Val x; x.kind = kind; x.reg = reg; return x; }
  bool isScalarKind() const { return kind == VKind::Int || kind == VKind::Float || kind == VKind::Bool; }
  bool isTensorLike() const { return kind == VKind::Tensor || kind == VKind::Unknown; }
  double asDouble() const { return kind == VKind::Float ? f : kind == VKind::Int ? static_cast<double>(i) : (b ? 1.0 : 0.0); }
  std::int64_t asInt() const { return kind == VKind::Int ? i : b ? 1 : 0; }
};

// What every function in the module looks like to a caller (collected before lowering).
struct FunctionInfo {
  std::string name;                  // module function name ("f" or "Cell.construct")
  std::string class_name;            // "" for top-level functions
  const Stmt* def = nullptr;
  std::vector<std::string> self_attrs;  // extra tensor parameters read as self.<name>
  int num_outputs = -1;              // -1: not known yet
  std::vector<Val> result_shapes;    // kinds/tokens of the results once lowered
  bool lowered = false;
  bool lowering = false;
};

struct VarInfo {
  std::int32_t reg = -1;
  int assignments = 0;               // syntactic count in the function
  bool has_static = false;           // `value` stands for the variable (no register needed)
  Val value;                         // kind/token of the latest assignment (or the static value)
};

struct LoopFrame {
  int continue_label = -1;
  int break_label = -1;
  int loop_id = -1;
};

struct ClassInfo {
  std::map<std::string, Val> constants;   // class-level NAME = constant
  std::set<std::string> methods;
};

class Lowerer {
 public:
  Lowerer(std::string_view source, std::string filename, const FrontendOptions& options)
      : source_(source), filename_(std::move(filename)), options_(options) {}

  Expected<std::vector<IrFunction>> run(const ModuleAst& module);

  // ---- shared by the lowering files ----
  Status error(ErrorCode code, std::string_view message, int line, int col) const;
  Status error(ErrorCode code, std::string_view message, const Expr& at) const { return error(code, message, at.line, at.col); }
  // LimitExceeded naming the line when the native stack is nearly used up (the parser bounds
  // the AST's depth, so this is the second line of defence for the recursive walks).
  Status checkStack(int line, int col) const;

  std::int32_t newReg() { return next_reg_++; }
  int newLabel() { return fn_->num_labels++; }
  void placeLabel(int label) { IrInst i; i.label = label; fn_->code.push_back(std::move(i)); }
  IrInst& emit(Opcode op, std::int32_t a = 0, std::int32_t b = 0, std::int32_t c = 0);
  void emitJump(int label);
  void emitBranch(std::int32_t cond, int if_true, int if_false);
  void setLoc(int line, int col) { loc_ = SourceLoc{line, col}; }

  // Registers and values.
  std::int32_t materialize(Val& v);
  Val loadConstInt(std::int64_t value);
  bool isVarReg(std::int32_t reg) const { return var_regs_.count(reg) > 0; }

  // Expressions.
  Expected<Val> lowerExpr(const Expr& e);
  Expected<Val> lowerCall(const Expr& e);
  Expected<Val> lowerAttribute(const Expr& e);
  Expected<Val> lowerSubscript(const Expr& e);
  Expected<Val> lowerBinary(const std::string& op, Val lhs, Val rhs, const Expr& at);
  Expected<Val> lowerCompare(const std::string& op, Val lhs, Val rhs, const Expr& at);
  Expected<Val> scalarBinary(Opcode op, Val lhs, Val rhs, VKind result);
  Expected<Val> scalarUnary(Opcode op, Val v, VKind result);
  Expected<Val> tensorOp(const std::string& op, std::vector<Val> inputs, NamedAttrs attrs, const Expr& at,
                         int num_outputs = 1);
  Expected<std::vector<Val>> tensorOpMulti(const std::string& op, std::vector<Val> inputs, NamedAttrs attrs,
                                           const Expr& at, int num_outputs);
  Expected<Val> callOpsFunction(const std::string& name, const Expr& call);
  Expected<Val> callMethod(const Expr& object_expr, const std::string& method, const Expr& call);
  Expected<Val> callBuiltin(const std::string& name, const Expr& call);
  Expected<Val> callUser(const FunctionInfo& callee, const Expr& call);
  Expected<Val> shapeOf(Val tensor, const Expr& at);
  Expected<Val> dimOf(Val tensor, std::int64_t axis, const Expr& at);

  // Compile-time constants for attributes (independent of the fold option).
  std::optional<Val> constEval(const Expr& e) const;
  Expected<std::vector<std::int64_t>> constInts(const Expr& e, std::string_view what) const;
  Expected<std::int64_t> constInt(const Expr& e, std::string_view what) const;

  // Shape tokens (shape_infer.cc).
  TensorDescriptor inferOutput(const std::string& op, const std::vector<Val>& inputs, const NamedAttrs& attrs,
                               int output_index, int num_outputs) const;

  const FrontendOptions& options() const { return options_; }

 private:
  Status collectFunctions(const ModuleAst& module);
  Status lowerFunction(FunctionInfo& info);
  Status lowerFunctionPass(FunctionInfo& info, IrFunction& out);
  Status lowerBlock(const std::vector<StmtPtr>& body);
  Status lowerStmt(const Stmt& s);
  Status lowerAssign(const Expr& target, Val value, const Stmt& s);
  Status assignName(const std::string& name, Val value, const Expr& at);
  Status lowerIf(const Stmt& s);
  Status lowerWhile(const Stmt& s);
  Status lowerFor(const Stmt& s);
  Status lowerReturn(const Stmt& s);
  Expected<Val> lowerBoolOp(const Expr& e);
  Expected<Val> lowerIfExp(const Expr& e);
  Expected<Val> lowerAddChain(const Expr& e);
  Expected<Val> readName(const Expr& e);
  Expected<Val> paramAnnotation(const frontend::Param& p, IrFunction& out, std::map<std::string, int>& dims);
  void countAssignments(const std::vector<StmtPtr>& body);
  void countTarget(const Expr& target);
  std::string sourceLine(int line) const;

 public:
  std::map<std::string, FunctionInfo> functions_;   // by module function name
  std::map<std::string, ClassInfo> classes_;
  std::map<std::string, Val> globals_;               // module-level constants
  std::string class_name_;                           // class of the function being lowered
  FunctionInfo* current_ = nullptr;

 private:
  std::string_view source_;
  std::string filename_;
  FrontendOptions options_;
  std::vector<std::string> order_;                  // module function names in definition order
  std::map<std::string, IrFunction> lowered_;       // by module function name
  std::set<std::string> recursive_;                 // functions that can reach themselves (never inlined)

  // Per-function state.
  IrFunction* fn_ = nullptr;
  std::map<std::string, VarInfo> vars_;
  std::set<std::int32_t> var_regs_;
  std::set<std::int32_t> static_regs_;  // temporaries a single-assignment variable stands for
  std::vector<LoopFrame> loops_;
  std::int32_t next_reg_ = 0;
  SourceLoc loc_;
  bool terminated_ = false;
  std::map<std::string, TensorDescriptor> pinned_;   // multi-assigned variables: joined token
  std::map<std::string, std::vector<TensorDescriptor>> assigned_tokens_;
  std::vector<Val> returns_;                          // result shapes seen
  int return_line_ = 0;
};

// Joins two tokens: equal dims stay, differing dims become anonymous dynamic, rank mismatch = [*].
TensorDescriptor joinTokens(const TensorDescriptor& a, const TensorDescriptor& b);
// A token as a caller sees a callee's result: dynamic ids dropped.
TensorDescriptor stripDimIds(const TensorDescriptor& t);

}  // namespace shapevm::frontend
