// SPDX-License-Identifier: Apache-2.0
// Lexer for the ShapeVM Python subset: Python tokens with INDENT/DEDENT, implicit line joining
// inside brackets, backslash continuation, comments, strings and int/float literals.
// Invariant: every token carries its 1-based line and column; a lexing error names both.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "shapevm/status.h"

namespace shapevm::frontend {

enum class TokenKind : std::uint8_t { Name, Int, Float, String, Op, Newline, Indent, Dedent, End };

struct Token {
  TokenKind kind = TokenKind::End;
  std::string text;       // name, operator, or the decoded string value
  std::int64_t int_value = 0;
  double float_value = 0.0;
  int line = 0;
  int col = 0;
};

// "`what` (line L, col C)": the one format of every frontend diagnostic.
Status frontendError(ErrorCode code, std::string_view message, int line, int col);

Expected<std::vector<Token>> tokenize(std::string_view source);

}  // namespace shapevm::frontend
