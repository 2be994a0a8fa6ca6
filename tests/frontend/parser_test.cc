// SPDX-License-Identifier: Apache-2.0
// Lexer and parser: tokens (INDENT/DEDENT, bracket joining, numbers, strings), AST shapes with
// line/col, and rejection of constructs outside the subset with construct + line + col.
#include <gtest/gtest.h>

#include "frontend/lexer.h"
#include "frontend/parser.h"
#include "test_util.h"

namespace shapevm::frontend {
namespace {

TEST(Lexer, IndentDedentAndBracketJoining) {
  auto tokens = tokenize("def f(a,\n      b):\n    x = 1  # c\n\n    return x\n");
  ASSERT_TRUE(tokens) << tokens.status().toString();
  std::string kinds;
  for (const Token& t : *tokens) {
    switch (t.kind) {
      case TokenKind::Indent: kinds += "I "; break;
      case TokenKind::Dedent: kinds += "D "; break;
      case TokenKind::Newline: kinds += "N "; break;
      case TokenKind::End: kinds += "E"; break;
      default: kinds += t.text + " ";
    }
  }
  EXPECT_EQ(kinds, "def f ( a , b ) : N I x = 1 N return x N D E");
}

TEST(Lexer, NumbersStringsAndPositions) {
  auto tokens = tokenize("x = 1e-5 + 0x10 + 3 + 'a\\n' \"b\"\n");
  ASSERT_TRUE(tokens);
  const auto& t = *tokens;
  EXPECT_EQ(t[2].kind, TokenKind::Float);
  EXPECT_DOUBLE_EQ(t[2].float_value, 1e-5);
  EXPECT_EQ(t[4].int_value, 16);
  EXPECT_EQ(t[6].int_value, 3);
  EXPECT_EQ(t[8].text, "a\n");
  EXPECT_EQ(t[8].line, 1);
  EXPECT_EQ(t[8].col, 23);
}

TEST(Lexer, Errors) {
  EXPECT_NE(tokenize("x = 'abc\n").status().message().find("unterminated string literal (line 1, col 5)"), std::string::npos);
  EXPECT_NE(tokenize("x = f'{y}'\n").status().message().find("`f`-prefixed strings are not supported"), std::string::npos);
  EXPECT_NE(tokenize("if x:\n    a = 1\n  b = 2\n").status().message().find("unindent"), std::string::npos);
}

TEST(Parser, StatementsAndLocations) {
  auto ast = parseModule("def f(x: Tensor[None, 4], n: int = 2):\n  a, b = x.shape\n  for i in range(n):\n    if i > 1:\n      break\n  return a * b\n");
  ASSERT_TRUE(ast) << ast.status().toString();
  ASSERT_EQ(ast->body.size(), 1u);
  const Stmt& def = *ast->body[0];
  EXPECT_EQ(def.kind, StmtKind::FunctionDef);
  ASSERT_EQ(def.params.size(), 2u);
  EXPECT_EQ(def.params[1].name, "n");
  ASSERT_TRUE(def.params[1].default_value);
  ASSERT_EQ(def.body.size(), 3u);
  EXPECT_EQ(def.body[0]->kind, StmtKind::Assign);
  EXPECT_EQ(def.body[0]->targets[0]->kind, ExprKind::Tuple);
  EXPECT_EQ(def.body[1]->kind, StmtKind::For);
  EXPECT_EQ(def.body[1]->line, 3);
  EXPECT_EQ(def.body[1]->col, 3);
  EXPECT_EQ(def.body[2]->value->kind, ExprKind::BinOp);
  EXPECT_EQ(def.body[2]->value->col, 10);
}

TEST(Parser, PrecedenceAndSlices) {
  auto ast = parseModule("y = -a ** 2 + b @ c * d\nz = x[:, 1:5:2, -1]\n");
  ASSERT_TRUE(ast);
  const Expr& y = *ast->body[0]->value;
  EXPECT_EQ(y.name, "+");
  EXPECT_EQ(y.lhs->kind, ExprKind::UnaryOp);
  EXPECT_EQ(y.lhs->lhs->name, "**");
  EXPECT_EQ(y.rhs->name, "*");
  EXPECT_EQ(y.rhs->lhs->name, "@");
  const Expr& z = *ast->body[1]->value;
  ASSERT_EQ(z.kind, ExprKind::Subscript);
  ASSERT_EQ(z.rhs->items.size(), 3u);
  EXPECT_EQ(z.rhs->items[0]->kind, ExprKind::Slice);
  EXPECT_TRUE(z.rhs->items[1]->slice_parts[2]);
}

TEST(Parser, UnsupportedConstructsNameLineAndCol) {
  struct Case { const char* source; const char* message; };
  const Case cases[] = {
      {"def f(x):\n    y = 1\n    g = lambda a: a\n", "`lambda` is not supported in ShapeVM functions (line 3, col 9)"},
      {"def f(x):\n    return [a for a in x]\n", "`list comprehension` is not supported in ShapeVM functions (line 2, col 12)"},
      {"def f(x):\n    try:\n        pass\n", "`try` is not supported in ShapeVM functions (line 2, col 5)"},
      {"def f(x):\n    with x:\n        pass\n", "`with` is not supported in ShapeVM functions (line 2, col 5)"},
      {"def f(x):\n    d = {}\n", "`dict/set literal` is not supported in ShapeVM functions (line 2, col 9)"},
      {"def f(x):\n    global y\n", "`global` is not supported in ShapeVM functions (line 2, col 5)"},
      {"def f(x):\n    return x is None\n", "`is` is not supported in ShapeVM functions (line 2, col 14)"},
      {"def f(*args):\n    pass\n", "`*args` is not supported in ShapeVM functions (line 1, col 7)"},
      {"def f(x):\n    return x | x\n", "`|` is not supported in ShapeVM functions (line 2, col 14)"},
  };
  for (const Case& c : cases) {
    auto ast = parseModule(c.source);
    ASSERT_FALSE(ast) << c.source;
    EXPECT_EQ(ast.status().code(), ErrorCode::Unsupported);
    EXPECT_EQ(ast.status().message(), c.message);
  }
}

TEST(Parser, SyntaxErrors) {
  auto ast = parseModule("def f(x):\n    return (x\n");
  ASSERT_FALSE(ast);
  EXPECT_EQ(ast.status().code(), ErrorCode::ParseError);
  EXPECT_NE(ast.status().message().find("syntax error"), std::string::npos);
  auto ast2 = parseModule("def f(x)\n    return x\n");
  ASSERT_FALSE(ast2);
  EXPECT_EQ(ast2.status().message(), "syntax error: expected ':', got end of line (line 1, col 9)");
}

}  // namespace
}  // namespace shapevm::frontend
