// SPDX-License-Identifier: Apache-2.0
// The AST of the ShapeVM Python subset. One Expr and one Stmt node type with a kind tag;
// children are owned by unique_ptr. Invariant: every node has the 1-based line/col of its
// first token, so every diagnostic and every emitted instruction can point at the source.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace shapevm::frontend {

enum class ExprKind : std::uint8_t {
  Name, Int, Float, Bool, None, Str, Tuple, List,
  BinOp,      // op: + - * / // % ** @
  UnaryOp,    // op: - + not ~
  BoolOp,     // op: and / or; items = operands
  Compare,    // items = operands, ops = comparison operators
  Call,       // lhs = callee, items = positional args, keywords
  Attribute,  // lhs.name
  Subscript,  // lhs[rhs]
  Slice,      // slice_parts[0..2] = lower, upper, step (nullptr when omitted)
  IfExp,      // items = {body, test, orelse}
};

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  ExprKind kind = ExprKind::None;
  int line = 0;
  int col = 0;
  std::string name;   // Name id, Attribute attr, Str value, BinOp/UnaryOp/BoolOp operator
  std::int64_t int_value = 0;
  double float_value = 0.0;
  bool bool_value = false;
  ExprPtr lhs, rhs;
  std::vector<ExprPtr> items;
  std::vector<std::string> ops;                             // Compare operators
  std::vector<std::pair<std::string, ExprPtr>> keywords;    // Call keyword arguments
  ExprPtr slice_parts[3];
  int height = 1;  // 1 + the tallest child's height (the parser bounds it by max_nesting)
};

enum class StmtKind : std::uint8_t {
  Expr, Assign, AugAssign, If, While, For, Break, Continue, Return, Pass, Assert,
  FunctionDef, ClassDef, Import,
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;

struct Param {
  std::string name;
  ExprPtr annotation;  // may be null
  ExprPtr default_value;
  int line = 0;
  int col = 0;
};

struct Stmt {
  StmtKind kind = StmtKind::Pass;
  int line = 0;
  int col = 0;
  int end_line = 0;                // last line of a simple statement
  std::vector<ExprPtr> targets;    // Assign: one or more chained targets; For: the loop target
  ExprPtr value;                   // Assign/AugAssign/Return value, Expr statement, If/While test, For iter, Assert test
  ExprPtr message;                 // Assert message
  std::string op;                  // AugAssign operator ("+")
  std::vector<StmtPtr> body;
  std::vector<StmtPtr> orelse;
  // FunctionDef / ClassDef
  std::string name;
  std::vector<Param> params;
  bool has_self = false;           // a method (first parameter `self`)
};

struct ModuleAst {
  std::vector<StmtPtr> body;
};

}  // namespace shapevm::frontend
