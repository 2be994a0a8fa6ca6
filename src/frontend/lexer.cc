// SPDX-License-Identifier: Apache-2.0
// Tokenizer: one pass over the source, a stack of indentation widths, a bracket depth that
// suspends NEWLINE/INDENT/DEDENT (implicit line joining). Tabs count to the next multiple of 8.
#include "frontend/lexer.h"

#include <cctype>
#include <cerrno>
#include <cstring>
#include <cstdlib>

#include <fmt/format.h>

namespace shapevm::frontend {

Status frontendError(ErrorCode code, std::string_view message, int line, int col) {
  return Status(code, fmt::format("{} (line {}, col {})", message, line, col));
}

namespace {

bool isNameStart(char ch) { return std::isalpha(static_cast<unsigned char>(ch)) || ch == '_'; }
bool isNameChar(char ch) { return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_'; }

class Lexer {
 public:
  explicit Lexer(std::string_view src) : src_(src) {}

  Expected<std::vector<Token>> run() {
    indents_.push_back(0);
    bool at_line_start = true;
    while (pos_ < src_.size()) {
      if (at_line_start && depth_ == 0) {
        // Measure indentation; blank and comment-only lines do not count.
        int width = 0;
        std::size_t p = pos_;
        while (p < src_.size() && (src_[p] == ' ' || src_[p] == '\t' || src_[p] == '\f')) {
          width = src_[p] == '\t' ? (width / 8 + 1) * 8 : width + 1;
          ++p;
        }
        if (p >= src_.size() || src_[p] == '\n' || src_[p] == '#' || src_[p] == '\r') {
          while (p < src_.size() && src_[p] != '\n') ++p;
          pos_ = p;
          if (pos_ < src_.size()) advanceLine();
          continue;
        }
        col_ = static_cast<int>(p - pos_) + 1;
        pos_ = p;
        if (width > indents_.back()) {
          indents_.push_back(width);
          push(TokenKind::Indent, "", line_, 1);
        } else {
          while (width < indents_.back()) {
            indents_.pop_back();
            push(TokenKind::Dedent, "", line_, col_);
          }
          if (width != indents_.back()) {
            return frontendError(ErrorCode::ParseError, "syntax error: unindent does not match any outer indentation level",
                                 line_, col_);
          }
        }
        at_line_start = false;
      }
      char ch = src_[pos_];
      if (ch == '\n') {
        if (depth_ == 0) {
          push(TokenKind::Newline, "", line_, col_);
          at_line_start = true;
        }
        advanceLine();
        continue;
      }
      if (ch == ' ' || ch == '\t' || ch == '\r' || ch == '\f') { advance(); continue; }
      if (ch == '#') {
        while (pos_ < src_.size() && src_[pos_] != '\n') advance();
        continue;
      }
      if (ch == '\\') {
        std::size_t p = pos_ + 1;
        while (p < src_.size() && src_[p] == '\r') ++p;
        if (p < src_.size() && src_[p] == '\n') {
          pos_ = p;
          advanceLine();
          continue;
        }
        return frontendError(ErrorCode::ParseError, "syntax error: unexpected character after line continuation", line_, col_);
      }
      if (isNameStart(ch)) {
        int line = line_, col = col_;
        std::size_t start = pos_;
        while (pos_ < src_.size() && isNameChar(src_[pos_])) advance();
        std::string name(src_.substr(start, pos_ - start));
        if (pos_ < src_.size() && (src_[pos_] == '"' || src_[pos_] == '\'') && name.size() <= 2) {
          bool bytes_or_format = false, raw = false;
          for (char p : name) {
            char lower = static_cast<char>(std::tolower(static_cast<unsigned char>(p)));
            if (lower == 'f' || lower == 'b') bytes_or_format = true;
            else if (lower == 'r') raw = true;
            else if (lower != 'u') bytes_or_format = true;
          }
          if (bytes_or_format) {
            return frontendError(ErrorCode::Unsupported,
                                 fmt::format("`{}`-prefixed strings are not supported in ShapeVM functions", name), line, col);
          }
          SVM_RETURN_IF_ERROR(lexString(line, col, raw));
          continue;
        }
        push(TokenKind::Name, std::move(name), line, col);
        continue;
      }
      if (std::isdigit(static_cast<unsigned char>(ch)) ||
          (ch == '.' && pos_ + 1 < src_.size() && std::isdigit(static_cast<unsigned char>(src_[pos_ + 1])))) {
        SVM_RETURN_IF_ERROR(lexNumber());
        continue;
      }
      if (ch == '"' || ch == '\'') {
        SVM_RETURN_IF_ERROR(lexString(line_, col_, false));
        continue;
      }
      SVM_RETURN_IF_ERROR(lexOperator());
    }
    if (!tokens_.empty() && tokens_.back().kind != TokenKind::Newline) push(TokenKind::Newline, "", line_, col_);
    while (indents_.size() > 1) {
      indents_.pop_back();
      push(TokenKind::Dedent, "", line_, col_);
    }
    push(TokenKind::End, "", line_, col_);
    return std::move(tokens_);
  }

 private:
  void push(TokenKind kind, std::string text, int line, int col) {
    Token t;
    t.kind = kind;
    t.text = std::move(text);
    t.line = line;
    t.col = col;
    tokens_.push_back(std::move(t));
  }
  void advance() { ++pos_; ++col_; }
  void advanceLine() { ++pos_; ++line_; col_ = 1; }

  Status lexNumber() {
    int line = line_, col = col_;
    std::size_t start = pos_;
    bool is_float = false;
    if (src_[pos_] == '0' && pos_ + 1 < src_.size() && std::strchr("xXoObB", src_[pos_ + 1]) != nullptr) {
      int base = std::strchr("xX", src_[pos_ + 1]) ? 16 : std::strchr("oO", src_[pos_ + 1]) ? 8 : 2;
      advance(); advance();
      std::string digits;
      while (pos_ < src_.size() && (std::isxdigit(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_')) {
        if (src_[pos_] != '_') digits += src_[pos_];
        advance();
      }
      Token t;
      t.kind = TokenKind::Int;
      t.int_value = static_cast<std::int64_t>(std::strtoull(digits.c_str(), nullptr, base));
      t.text = std::string(src_.substr(start, pos_ - start));
      t.line = line;
      t.col = col;
      tokens_.push_back(std::move(t));
      return Status::ok();
    }
    std::string text;
    auto digits = [&] {
      while (pos_ < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_')) {
        if (src_[pos_] != '_') text += src_[pos_];
        advance();
      }
    };
    digits();
    if (pos_ < src_.size() && src_[pos_] == '.') {
      is_float = true;
      text += '.';
      advance();
      digits();
    }
    if (pos_ < src_.size() && (src_[pos_] == 'e' || src_[pos_] == 'E')) {
      std::size_t p = pos_ + 1;
      if (p < src_.size() && (src_[p] == '+' || src_[p] == '-')) ++p;
      if (p < src_.size() && std::isdigit(static_cast<unsigned char>(src_[p]))) {
        is_float = true;
        text += 'e';
        advance();
        if (src_[pos_] == '+' || src_[pos_] == '-') { text += src_[pos_]; advance(); }
        digits();
      }
    }
    if (pos_ < src_.size() && (src_[pos_] == 'j' || src_[pos_] == 'J')) {
      return frontendError(ErrorCode::Unsupported, "complex literals are not supported in ShapeVM functions", line, col);
    }
    if (pos_ < src_.size() && isNameStart(src_[pos_])) {
      return frontendError(ErrorCode::ParseError, "syntax error: invalid number literal", line, col);
    }
    Token t;
    t.line = line;
    t.col = col;
    t.text = std::string(src_.substr(start, pos_ - start));
    if (is_float) {
      t.kind = TokenKind::Float;
      t.float_value = std::strtod(text.c_str(), nullptr);
    } else {
      t.kind = TokenKind::Int;
      errno = 0;
      unsigned long long v = std::strtoull(text.c_str(), nullptr, 10);
      if (errno != 0 || v > static_cast<unsigned long long>(INT64_MAX)) {
        return frontendError(ErrorCode::Unsupported, "integer literal does not fit in 64 bits", line, col);
      }
      t.int_value = static_cast<std::int64_t>(v);
    }
    tokens_.push_back(std::move(t));
    return Status::ok();
  }

  Status lexString(int line, int col, bool raw) {
    char quote = src_[pos_];
    bool triple = pos_ + 2 < src_.size() && src_[pos_ + 1] == quote && src_[pos_ + 2] == quote;
    std::size_t qlen = triple ? 3 : 1;
    for (std::size_t i = 0; i < qlen; ++i) advance();
    std::string value;
    while (true) {
      if (pos_ >= src_.size()) return frontendError(ErrorCode::ParseError, "syntax error: unterminated string literal", line, col);
      char ch = src_[pos_];
      if (ch == '\n' && !triple) return frontendError(ErrorCode::ParseError, "syntax error: unterminated string literal", line, col);
      if (ch == quote && (!triple || (pos_ + 2 < src_.size() && src_[pos_ + 1] == quote && src_[pos_ + 2] == quote))) {
        for (std::size_t i = 0; i < qlen; ++i) advance();
        break;
      }
      if (ch == '\\' && !raw && pos_ + 1 < src_.size()) {
        char next = src_[pos_ + 1];
        advance();
        switch (next) {
          case 'n': value += '\n'; break;
          case 't': value += '\t'; break;
          case 'r': value += '\r'; break;
          case '0': value += '\0'; break;
          case '\\': value += '\\'; break;
          case '\'': value += '\''; break;
          case '"': value += '"'; break;
          case '\n': advanceLine(); continue;
          default: value += '\\'; value += next; break;
        }
        advance();
        continue;
      }
      value += ch;
      if (ch == '\n') advanceLine(); else advance();
    }
    push(TokenKind::String, std::move(value), line, col);
    return Status::ok();
  }

  Status lexOperator() {
    static const char* const kThree[] = {"**=", "//=", ">>=", "<<=", "...", nullptr};
    static const char* const kTwo[] = {"**", "//", "==", "!=", "<=", ">=", "+=", "-=", "*=", "/=", "%=", "@=", "&=", "|=",
                                       "^=", "->", "<<", ">>", ":=", nullptr};
    int line = line_, col = col_;
    std::string_view rest = src_.substr(pos_);
    for (const char* const* list : {kThree, kTwo}) {
      for (const char* const* op = list; *op != nullptr; ++op) {
        std::string_view candidate(*op);
        if (rest.substr(0, candidate.size()) == candidate) {
          for (std::size_t i = 0; i < candidate.size(); ++i) advance();
          push(TokenKind::Op, std::string(candidate), line, col);
          return Status::ok();
        }
      }
    }
    char ch = rest[0];
    if (std::strchr("+-*/%@<>=()[]{},:.;~&|^!", ch) == nullptr || ch == '!') {
      return frontendError(ErrorCode::ParseError, fmt::format("syntax error: unexpected character '{}'", ch), line, col);
    }
    if (ch == '(' || ch == '[' || ch == '{') ++depth_;
    if ((ch == ')' || ch == ']' || ch == '}') && depth_ > 0) --depth_;
    advance();
    push(TokenKind::Op, std::string(1, ch), line, col);
    return Status::ok();
  }

  std::string_view src_;
  std::size_t pos_ = 0;
  int line_ = 1;
  int col_ = 1;
  int depth_ = 0;
  std::vector<int> indents_;
  std::vector<Token> tokens_;
};

}  // namespace

Expected<std::vector<Token>> tokenize(std::string_view source) {
  // A UTF-8 byte-order mark opens many editor-saved files; CPython skips it, so do we.
  constexpr std::string_view kUtf8Bom = "\xEF\xBB\xBF";
  if (source.starts_with(kUtf8Bom)) source.remove_prefix(kUtf8Bom.size());
  Lexer lexer(source);
  return lexer.run();
}

}  // namespace shapevm::frontend
