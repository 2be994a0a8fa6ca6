// SPDX-License-Identifier: Apache-2.0
// Parser: tokens -> AST. Python's precedence ladder (ternary, or, and, not, comparisons,
// + -, * / // % @, unary, **, trailers). Every unsupported keyword or form returns
// Unsupported "`<construct>` is not supported in ShapeVM functions (line L, col C)".
#include "frontend/parser.h"

#include <set>

#include <fmt/format.h>

#include "frontend/lexer.h"
#include "support/native_stack.h"
#include "support/tunables.h"

namespace shapevm::frontend {
namespace {

// `a.b.c` for a dotted name, else a placeholder (decorator messages).
std::string dottedName(const Expr& e) {
  if (e.kind == ExprKind::Name) return e.name;
  if (e.kind == ExprKind::Attribute && e.lhs) return dottedName(*e.lhs) + "." + e.name;
  return "<expression>";
}

Status unsupported(std::string_view construct, int line, int col) {
  return frontendError(ErrorCode::Unsupported, fmt::format("`{}` is not supported in ShapeVM functions", construct), line, col);
}

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens)
      : toks_(std::move(tokens)), max_nesting_(static_cast<int>(Tunables::get(Tunable::MaxNesting))) {}

  Expected<ModuleAst> run() {
    ModuleAst module;
    while (!atKind(TokenKind::End)) {
      if (atKind(TokenKind::Newline)) { ++pos_; continue; }
      if (atKind(TokenKind::Indent)) return syntaxError("unexpected indent");
      SVM_RETURN_IF_ERROR(parseStatement(module.body));
    }
    return module;
  }

 private:
  const Token& cur() const { return toks_[pos_]; }
  const Token& peek(std::size_t ahead = 1) const { return toks_[std::min(pos_ + ahead, toks_.size() - 1)]; }
  bool atKind(TokenKind kind) const { return cur().kind == kind; }
  bool atOp(std::string_view op) const { return cur().kind == TokenKind::Op && cur().text == op; }
  bool atName(std::string_view name) const { return cur().kind == TokenKind::Name && cur().text == name; }

  Status syntaxError(std::string_view what) const {
    return frontendError(ErrorCode::ParseError, fmt::format("syntax error: {}", what), cur().line, cur().col);
  }
  std::string describe(const Token& t) const {
    switch (t.kind) {
      case TokenKind::Newline: return "end of line";
      case TokenKind::Indent: return "indent";
      case TokenKind::Dedent: return "dedent";
      case TokenKind::End: return "end of file";
      case TokenKind::String: return "string";
      default: return "'" + t.text + "'";
    }
  }
  // Every recursive descent step holds a Nest; deeper than max_nesting (or than the native
  // stack allows) is an error naming the line, never a stack overflow.
  struct Nest {
    explicit Nest(int& depth) : depth_(++depth) {}
    ~Nest() { --depth_; }
    Nest(const Nest&) = delete;
    Nest& operator=(const Nest&) = delete;
    int& depth_;
  };
  Status tooDeep(int line, int col) const {
    return frontendError(ErrorCode::LimitExceeded,
                         fmt::format("nested too deeply (more than {} levels of brackets, operators or blocks; "
                                     "tunable max_nesting)",
                                     max_nesting_),
                         line, col);
  }
  Status checkNesting() const {
    if (depth_ > max_nesting_ || !nativeStackHasRoom()) return tooDeep(cur().line, cur().col);
    return Status::ok();
  }
  // Sets e's height from its children; a left-leaning chain (`a + a + ... + a`) is as deep to
  // the walks that follow as nested brackets, so it counts against the same limit.
  Expected<ExprPtr> sealed(ExprPtr e) const {
    int h = 0;
    const auto take = [&h](const ExprPtr& child) {
      if (child) h = std::max(h, child->height);
    };
    take(e->lhs);
    take(e->rhs);
    for (const ExprPtr& item : e->items) take(item);
    for (const auto& [key, value] : e->keywords) take(value);
    for (const ExprPtr& part : e->slice_parts) take(part);
    e->height = h + 1;
    if (e->height > max_nesting_) return tooDeep(e->line, e->col);
    return e;
  }
  Status expectOp(std::string_view op) {
    if (!atOp(op)) return syntaxError(fmt::format("expected '{}', got {}", op, describe(cur())));
    ++pos_;
    return Status::ok();
  }
  Status expectNewline() {
    if (atOp(";")) {
      ++pos_;
      if (atKind(TokenKind::Newline)) { ++pos_; return Status::ok(); }
      return Status::ok();
    }
    if (!atKind(TokenKind::Newline) && !atKind(TokenKind::End)) {
      return syntaxError(fmt::format("expected end of line, got {}", describe(cur())));
    }
    if (atKind(TokenKind::Newline)) ++pos_;
    return Status::ok();
  }
  Expected<std::string> expectName() {
    if (!atKind(TokenKind::Name) || isKeyword(cur().text)) return syntaxError(fmt::format("expected a name, got {}", describe(cur())));
    return toks_[pos_++].text;
  }
  static bool isKeyword(const std::string& word) {
    static const std::set<std::string> kKeywords = {
        "False", "None", "True", "and", "as", "assert", "async", "await", "break", "class", "continue", "def", "del",
        "elif", "else", "except", "finally", "for", "from", "global", "if", "import", "in", "is", "lambda", "nonlocal",
        "not", "or", "pass", "raise", "return", "try", "while", "with", "yield"};
    return kKeywords.count(word) > 0;
  }

  StmtPtr newStmt(StmtKind kind, const Token& at) {
    auto s = std::make_unique<Stmt>();
    s->kind = kind;
    s->line = at.line;
    s->col = at.col;
    return s;
  }
  ExprPtr newExpr(ExprKind kind, int line, int col) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    e->col = col;
    return e;
  }

  // ---- statements ----
  Status parseBlock(std::vector<StmtPtr>& out) {
    SVM_RETURN_IF_ERROR(expectOp(":"));
    if (!atKind(TokenKind::Newline)) {  // `if x: return y` on one line
      return parseSimpleStatements(out);
    }
    ++pos_;
    if (!atKind(TokenKind::Indent)) return syntaxError("expected an indented block");
    ++pos_;
    while (!atKind(TokenKind::Dedent) && !atKind(TokenKind::End)) {
      if (atKind(TokenKind::Newline)) { ++pos_; continue; }
      SVM_RETURN_IF_ERROR(parseStatement(out));
    }
    if (atKind(TokenKind::Dedent)) ++pos_;
    return Status::ok();
  }

  Status parseStatement(std::vector<StmtPtr>& out) {
    Nest nest(depth_);
    SVM_RETURN_IF_ERROR(checkNesting());
    const Token& t = cur();
    if (atOp("@")) {  // @shapevm.jit (or @jit, optionally called) is accepted and changes nothing
      ++pos_;
      const Token at = cur();
      SVM_ASSIGN_OR_RETURN(ExprPtr decorator, parseExpr());
      const Expr* callee = decorator->kind == ExprKind::Call ? decorator->lhs.get() : decorator.get();
      if (!((callee->kind == ExprKind::Name || callee->kind == ExprKind::Attribute) && callee->name == "jit")) {
        return unsupported(fmt::format("@{}", dottedName(*callee)), at.line, at.col);
      }
      SVM_RETURN_IF_ERROR(expectNewline());
      while (atKind(TokenKind::Newline)) ++pos_;
      if (!atName("def") && !atName("class") && !atOp("@")) return syntaxError("expected 'def' or 'class' after a decorator");
      return parseStatement(out);
    }
    if (t.kind == TokenKind::Name) {
      const std::string& w = t.text;
      if (w == "def") return parseDef(out);
      if (w == "class") return parseClass(out);
      if (w == "if") return parseIf(out);
      if (w == "while") return parseWhile(out);
      if (w == "for") return parseFor(out);
      if (w == "try" || w == "with" || w == "async") return unsupported(w, t.line, t.col);
      if (w == "elif" || w == "else" || w == "except" || w == "finally") return syntaxError(fmt::format("unexpected '{}'", w));
    }
    return parseSimpleStatements(out);
  }

  Status parseSimpleStatements(std::vector<StmtPtr>& out) {
    while (true) {
      SVM_RETURN_IF_ERROR(parseSimple(out));
      if (atOp(";")) {
        ++pos_;
        if (atKind(TokenKind::Newline) || atKind(TokenKind::End)) break;
        continue;
      }
      break;
    }
    if (!atKind(TokenKind::Newline) && !atKind(TokenKind::End)) {
      return syntaxError(fmt::format("expected end of line, got {}", describe(cur())));
    }
    if (atKind(TokenKind::Newline)) ++pos_;
    return Status::ok();
  }

  Status parseSimple(std::vector<StmtPtr>& out) {
    const Token t = cur();
    StmtPtr s;
    if (t.kind == TokenKind::Name) {
      const std::string& w = t.text;
      if (w == "pass" || w == "break" || w == "continue") {
        ++pos_;
        s = newStmt(w == "pass" ? StmtKind::Pass : w == "break" ? StmtKind::Break : StmtKind::Continue, t);
      } else if (w == "return") {
        ++pos_;
        s = newStmt(StmtKind::Return, t);
        if (!atKind(TokenKind::Newline) && !atOp(";") && !atKind(TokenKind::End)) {
          SVM_ASSIGN_OR_RETURN(s->value, parseTestList());
        }
      } else if (w == "assert") {
        ++pos_;
        s = newStmt(StmtKind::Assert, t);
        SVM_ASSIGN_OR_RETURN(s->value, parseExpr());
        if (atOp(",")) {
          ++pos_;
          SVM_ASSIGN_OR_RETURN(s->message, parseExpr());
        }
      } else if (w == "import" || w == "from") {
        s = newStmt(StmtKind::Import, t);
        ++pos_;
        // Only the shapevm package (and __future__/typing, which change nothing) may be imported.
        do {
          if (atOp(",")) ++pos_;
          const Token& module_token = cur();
          std::string module;
          if (atKind(TokenKind::Name)) module += toks_[pos_++].text;
          while (atOp(".") && peek().kind == TokenKind::Name) {
            module += "." + peek().text;
            pos_ += 2;
          }
          const std::string root = module.substr(0, module.find('.'));
          if (root != "shapevm" && root != "__future__" && root != "typing") {
            return frontendError(ErrorCode::Unsupported,
                                 fmt::format("import of module `{}` is not supported in ShapeVM programs (only shapevm)",
                                             module.empty() ? describe(module_token) : module),
                                 module_token.line, module_token.col);
          }
          if (w == "from") break;
          if (atName("as")) pos_ += 2;
        } while (atOp(","));
        while (!atKind(TokenKind::Newline) && !atKind(TokenKind::End) && !atOp(";")) ++pos_;
      } else if (w == "del" || w == "global" || w == "nonlocal" || w == "raise" || w == "yield" || w == "await" ||
                 w == "lambda") {
        return unsupported(w, t.line, t.col);
      }
    }
    if (!s) {
      SVM_ASSIGN_OR_RETURN(ExprPtr first, parseTestList());
      if (atOp("=")) {
        s = newStmt(StmtKind::Assign, t);
        s->targets.push_back(std::move(first));
        while (atOp("=")) {
          ++pos_;
          SVM_ASSIGN_OR_RETURN(ExprPtr next, parseTestList());
          s->targets.push_back(std::move(next));
        }
        s->value = std::move(s->targets.back());
        s->targets.pop_back();
      } else if (atOp(":")) {  // annotated assignment `x: int = 3`
        ++pos_;
        SVM_ASSIGN_OR_RETURN(ExprPtr annotation, parseExpr());
        (void)annotation;
        if (!atOp("=")) return unsupported("annotation without a value", t.line, t.col);
        ++pos_;
        s = newStmt(StmtKind::Assign, t);
        s->targets.push_back(std::move(first));
        SVM_ASSIGN_OR_RETURN(s->value, parseTestList());
      } else if (cur().kind == TokenKind::Op && cur().text.size() >= 2 && cur().text.back() == '=' &&
                 cur().text != "==" && cur().text != "<=" && cur().text != ">=" && cur().text != "!=") {
        std::string op = cur().text.substr(0, cur().text.size() - 1);
        if (op == "&" || op == "|" || op == "^" || op == "<<" || op == ">>" || op == ":") {
          return unsupported(cur().text, cur().line, cur().col);
        }
        ++pos_;
        s = newStmt(StmtKind::AugAssign, t);
        s->op = op;
        s->targets.push_back(std::move(first));
        SVM_ASSIGN_OR_RETURN(s->value, parseTestList());
      } else {
        s = newStmt(StmtKind::Expr, t);
        s->value = std::move(first);
      }
    }
    s->end_line = toks_[pos_ > 0 ? pos_ - 1 : 0].line;
    out.push_back(std::move(s));
    return Status::ok();
  }

  Status parseDef(std::vector<StmtPtr>& out) {
    StmtPtr s = newStmt(StmtKind::FunctionDef, cur());
    ++pos_;
    SVM_ASSIGN_OR_RETURN(s->name, expectName());
    SVM_RETURN_IF_ERROR(expectOp("("));
    while (!atOp(")")) {
      if (atOp("*") || atOp("**") || atOp("/")) return unsupported(cur().text == "/" ? "positional-only marker `/`" : cur().text + "args", cur().line, cur().col);
      Param p;
      p.line = cur().line;
      p.col = cur().col;
      SVM_ASSIGN_OR_RETURN(p.name, expectName());
      if (atOp(":")) {
        ++pos_;
        SVM_ASSIGN_OR_RETURN(p.annotation, parseExpr());
      }
      if (atOp("=")) {
        ++pos_;
        SVM_ASSIGN_OR_RETURN(p.default_value, parseExpr());
      }
      s->params.push_back(std::move(p));
      if (!atOp(",")) break;
      ++pos_;
    }
    SVM_RETURN_IF_ERROR(expectOp(")"));
    if (atOp("->")) {
      ++pos_;
      SVM_ASSIGN_OR_RETURN(ExprPtr ret, parseExpr());
      (void)ret;
    }
    s->end_line = cur().line;
    SVM_RETURN_IF_ERROR(parseBlock(s->body));
    out.push_back(std::move(s));
    return Status::ok();
  }

  Status parseClass(std::vector<StmtPtr>& out) {
    StmtPtr s = newStmt(StmtKind::ClassDef, cur());
    ++pos_;
    SVM_ASSIGN_OR_RETURN(s->name, expectName());
    if (atOp("(")) {  // base classes are ignored
      int depth = 0;
      do {
        if (atOp("(")) ++depth;
        if (atOp(")")) --depth;
        if (atKind(TokenKind::End)) return syntaxError("unclosed '('");
        ++pos_;
      } while (depth > 0);
    }
    s->end_line = cur().line;
    SVM_RETURN_IF_ERROR(parseBlock(s->body));
    out.push_back(std::move(s));
    return Status::ok();
  }

  Status parseIf(std::vector<StmtPtr>& out) {
    Nest nest(depth_);
    SVM_RETURN_IF_ERROR(checkNesting());
    StmtPtr s = newStmt(StmtKind::If, cur());
    ++pos_;
    SVM_ASSIGN_OR_RETURN(s->value, parseExpr());
    s->end_line = cur().line;
    SVM_RETURN_IF_ERROR(parseBlock(s->body));
    while (atKind(TokenKind::Newline)) ++pos_;
    if (atName("elif")) {
      SVM_RETURN_IF_ERROR(parseIf(s->orelse));
      out.push_back(std::move(s));
      return Status::ok();
    }
    if (atName("else")) {
      ++pos_;
      SVM_RETURN_IF_ERROR(parseBlock(s->orelse));
    }
    out.push_back(std::move(s));
    return Status::ok();
  }

  Status parseWhile(std::vector<StmtPtr>& out) {
    StmtPtr s = newStmt(StmtKind::While, cur());
    ++pos_;
    SVM_ASSIGN_OR_RETURN(s->value, parseExpr());
    s->end_line = cur().line;
    SVM_RETURN_IF_ERROR(parseBlock(s->body));
    if (atName("else")) return unsupported("while ... else", cur().line, cur().col);
    out.push_back(std::move(s));
    return Status::ok();
  }

  Status parseFor(std::vector<StmtPtr>& out) {
    StmtPtr s = newStmt(StmtKind::For, cur());
    ++pos_;
    SVM_ASSIGN_OR_RETURN(ExprPtr target, parseTargetList());
    s->targets.push_back(std::move(target));
    if (!atName("in")) return syntaxError(fmt::format("expected 'in', got {}", describe(cur())));
    ++pos_;
    SVM_ASSIGN_OR_RETURN(s->value, parseTestList());
    s->end_line = cur().line;
    SVM_RETURN_IF_ERROR(parseBlock(s->body));
    if (atName("else")) return unsupported("for ... else", cur().line, cur().col);
    out.push_back(std::move(s));
    return Status::ok();
  }

  // ---- expressions ----
  Expected<ExprPtr> parseTargetList() {
    int line = cur().line, col = cur().col;
    SVM_ASSIGN_OR_RETURN(ExprPtr first, parseBitOr());
    if (!atOp(",")) return first;
    ExprPtr tuple = newExpr(ExprKind::Tuple, line, col);
    tuple->items.push_back(std::move(first));
    while (atOp(",")) {
      ++pos_;
      if (atName("in")) break;
      SVM_ASSIGN_OR_RETURN(ExprPtr next, parseBitOr());
      tuple->items.push_back(std::move(next));
    }
    return sealed(std::move(tuple));
  }

  // `a, b` (a tuple without parentheses) or one expression.
  Expected<ExprPtr> parseTestList() {
    int line = cur().line, col = cur().col;
    SVM_ASSIGN_OR_RETURN(ExprPtr first, parseExpr());
    if (!atOp(",")) return first;
    ExprPtr tuple = newExpr(ExprKind::Tuple, line, col);
    tuple->items.push_back(std::move(first));
    while (atOp(",")) {
      ++pos_;
      if (atKind(TokenKind::Newline) || atOp("=") || atOp(")") || atOp(";") || atKind(TokenKind::End)) break;
      SVM_ASSIGN_OR_RETURN(ExprPtr next, parseExpr());
      tuple->items.push_back(std::move(next));
    }
    return sealed(std::move(tuple));
  }

  Expected<ExprPtr> parseExpr() {
    Nest nest(depth_);
    SVM_RETURN_IF_ERROR(checkNesting());
    if (atName("lambda")) return unsupported("lambda", cur().line, cur().col);
    if (atName("yield") || atName("await")) return unsupported(cur().text, cur().line, cur().col);
    if (atOp("*")) return unsupported("starred expression", cur().line, cur().col);
    int line = cur().line, col = cur().col;
    SVM_ASSIGN_OR_RETURN(ExprPtr body, parseOr());
    if (atOp(":=")) return unsupported(":=", cur().line, cur().col);
    if (!atName("if")) return body;
    ++pos_;
    SVM_ASSIGN_OR_RETURN(ExprPtr test, parseOr());
    if (!atName("else")) return syntaxError(fmt::format("expected 'else', got {}", describe(cur())));
    ++pos_;
    SVM_ASSIGN_OR_RETURN(ExprPtr orelse, parseExpr());
    ExprPtr e = newExpr(ExprKind::IfExp, line, col);
    e->items.push_back(std::move(body));
    e->items.push_back(std::move(test));
    e->items.push_back(std::move(orelse));
    return sealed(std::move(e));
  }

  Expected<ExprPtr> parseBoolChain(const char* word, bool is_or) {
    int line = cur().line, col = cur().col;
    SVM_ASSIGN_OR_RETURN(ExprPtr first, is_or ? parseBoolChain("and", false) : parseNot());
    if (!atName(word)) return first;
    ExprPtr e = newExpr(ExprKind::BoolOp, line, col);
    e->name = word;
    e->items.push_back(std::move(first));
    while (atName(word)) {
      ++pos_;
      SVM_ASSIGN_OR_RETURN(ExprPtr next, is_or ? parseBoolChain("and", false) : parseNot());
      e->items.push_back(std::move(next));
    }
    return sealed(std::move(e));
  }
  Expected<ExprPtr> parseOr() { return parseBoolChain("or", true); }

  Expected<ExprPtr> parseNot() {
    Nest nest(depth_);
    SVM_RETURN_IF_ERROR(checkNesting());
    if (atName("not")) {
      ExprPtr e = newExpr(ExprKind::UnaryOp, cur().line, cur().col);
      ++pos_;
      e->name = "not";
      SVM_ASSIGN_OR_RETURN(e->lhs, parseNot());
      return sealed(std::move(e));
    }
    return parseComparison();
  }

  Expected<ExprPtr> parseComparison() {
    int line = cur().line, col = cur().col;
    SVM_ASSIGN_OR_RETURN(ExprPtr first, parseBitOr());
    ExprPtr e;
    while (true) {
      std::string op;
      if (atName("in") || (atName("not") && peek().kind == TokenKind::Name && peek().text == "in")) {
        return unsupported(atName("in") ? "in" : "not in", cur().line, cur().col);
      }
      if (atName("is")) return unsupported("is", cur().line, cur().col);
      if (atOp("<") || atOp(">") || atOp("==") || atOp("!=") || atOp("<=") || atOp(">=")) op = cur().text;
      if (op.empty()) break;
      ++pos_;
      if (!e) {
        e = newExpr(ExprKind::Compare, line, col);
        e->items.push_back(std::move(first));
      }
      e->ops.push_back(op);
      SVM_ASSIGN_OR_RETURN(ExprPtr next, parseBitOr());
      e->items.push_back(std::move(next));
    }
    if (e) return sealed(std::move(e));
    return first;
  }

  Expected<ExprPtr> parseBitOr() {
    SVM_ASSIGN_OR_RETURN(ExprPtr e, parseArith());
    if (atOp("|") || atOp("&") || atOp("^") || atOp("<<") || atOp(">>")) {
      return unsupported(cur().text, cur().line, cur().col);
    }
    return e;
  }

  Expected<ExprPtr> parseArith() {
    SVM_ASSIGN_OR_RETURN(ExprPtr left, parseTerm());
    while (atOp("+") || atOp("-")) {
      ExprPtr e = newExpr(ExprKind::BinOp, cur().line, cur().col);
      e->name = cur().text;
      ++pos_;
      e->lhs = std::move(left);
      SVM_ASSIGN_OR_RETURN(e->rhs, parseTerm());
      e->line = e->lhs->line;
      e->col = e->lhs->col;
      SVM_ASSIGN_OR_RETURN(left, sealed(std::move(e)));
    }
    return left;
  }

  Expected<ExprPtr> parseTerm() {
    SVM_ASSIGN_OR_RETURN(ExprPtr left, parseFactor());
    while (atOp("*") || atOp("/") || atOp("//") || atOp("%") || atOp("@")) {
      ExprPtr e = newExpr(ExprKind::BinOp, cur().line, cur().col);
      e->name = cur().text;
      ++pos_;
      e->lhs = std::move(left);
      SVM_ASSIGN_OR_RETURN(e->rhs, parseFactor());
      e->line = e->lhs->line;
      e->col = e->lhs->col;
      SVM_ASSIGN_OR_RETURN(left, sealed(std::move(e)));
    }
    return left;
  }

  Expected<ExprPtr> parseFactor() {
    Nest nest(depth_);
    SVM_RETURN_IF_ERROR(checkNesting());
    if (atOp("-") || atOp("+") || atOp("~")) {
      if (atOp("~")) return unsupported("~", cur().line, cur().col);
      ExprPtr e = newExpr(ExprKind::UnaryOp, cur().line, cur().col);
      e->name = cur().text;
      ++pos_;
      SVM_ASSIGN_OR_RETURN(e->lhs, parseFactor());
      return sealed(std::move(e));
    }
    return parsePower();
  }

  Expected<ExprPtr> parsePower() {
    SVM_ASSIGN_OR_RETURN(ExprPtr base, parseAtomExpr());
    if (!atOp("**")) return base;
    ExprPtr e = newExpr(ExprKind::BinOp, base->line, base->col);
    e->name = "**";
    ++pos_;
    e->lhs = std::move(base);
    SVM_ASSIGN_OR_RETURN(e->rhs, parseFactor());
    return sealed(std::move(e));
  }

  Expected<ExprPtr> parseAtomExpr() {
    SVM_ASSIGN_OR_RETURN(ExprPtr e, parseAtom());
    while (true) {
      if (atOp("(")) {
        ExprPtr call = newExpr(ExprKind::Call, cur().line, cur().col);
        ++pos_;
        call->lhs = std::move(e);
        while (!atOp(")")) {
          if (atOp("*") || atOp("**")) return unsupported(cur().text + "args in calls", cur().line, cur().col);
          if (atKind(TokenKind::Name) && peek().kind == TokenKind::Op && peek().text == "=") {
            std::string key = cur().text;
            pos_ += 2;
            SVM_ASSIGN_OR_RETURN(ExprPtr v, parseExpr());
            call->keywords.emplace_back(std::move(key), std::move(v));
          } else {
            if (!call->keywords.empty()) return syntaxError("positional argument follows keyword argument");
            SVM_ASSIGN_OR_RETURN(ExprPtr v, parseExpr());
            if (atName("for")) return unsupported("generator expression", cur().line, cur().col);
            call->items.push_back(std::move(v));
          }
          if (!atOp(",")) break;
          ++pos_;
        }
        SVM_RETURN_IF_ERROR(expectOp(")"));
        call->line = call->lhs->line;
        call->col = call->lhs->col;
        SVM_ASSIGN_OR_RETURN(e, sealed(std::move(call)));
      } else if (atOp("[")) {
        ExprPtr sub = newExpr(ExprKind::Subscript, e->line, e->col);
        int line = cur().line, col = cur().col;
        ++pos_;
        sub->lhs = std::move(e);
        std::vector<ExprPtr> parts;
        bool trailing_comma = false;
        while (!atOp("]")) {
          SVM_ASSIGN_OR_RETURN(ExprPtr part, parseSliceItem());
          parts.push_back(std::move(part));
          trailing_comma = false;
          if (!atOp(",")) break;
          ++pos_;
          trailing_comma = true;
        }
        SVM_RETURN_IF_ERROR(expectOp("]"));
        if (parts.empty()) return syntaxError("empty subscript");
        if (parts.size() == 1 && !trailing_comma) {
          sub->rhs = std::move(parts[0]);
        } else {
          ExprPtr index = newExpr(ExprKind::Tuple, line, col + 1);
          index->items = std::move(parts);
          SVM_ASSIGN_OR_RETURN(sub->rhs, sealed(std::move(index)));
        }
        SVM_ASSIGN_OR_RETURN(e, sealed(std::move(sub)));
      } else if (atOp(".")) {
        ++pos_;
        ExprPtr attr = newExpr(ExprKind::Attribute, e->line, e->col);
        SVM_ASSIGN_OR_RETURN(attr->name, expectName());
        attr->lhs = std::move(e);
        SVM_ASSIGN_OR_RETURN(e, sealed(std::move(attr)));
      } else {
        return e;
      }
    }
  }

  Expected<ExprPtr> parseSliceItem() {
    int line = cur().line, col = cur().col;
    ExprPtr lower;
    if (!atOp(":")) {
      SVM_ASSIGN_OR_RETURN(lower, parseExpr());
      if (!atOp(":")) return lower;
    }
    ExprPtr slice = newExpr(ExprKind::Slice, line, col);
    slice->slice_parts[0] = std::move(lower);
    ++pos_;  // ':'
    if (!atOp(":") && !atOp(",") && !atOp("]")) {
      SVM_ASSIGN_OR_RETURN(slice->slice_parts[1], parseExpr());
    }
    if (atOp(":")) {
      ++pos_;
      if (!atOp(",") && !atOp("]")) {
        SVM_ASSIGN_OR_RETURN(slice->slice_parts[2], parseExpr());
      }
    }
    return sealed(std::move(slice));
  }

  Expected<ExprPtr> parseSequence(std::string_view close, ExprKind kind, int line, int col, bool* had_comma) {
    ExprPtr e = newExpr(kind, line, col);
    *had_comma = false;
    while (!atOp(close)) {
      SVM_ASSIGN_OR_RETURN(ExprPtr item, parseExpr());
      if (atName("for")) {
        return unsupported(kind == ExprKind::List ? "list comprehension" : "generator expression", line, col);
      }
      e->items.push_back(std::move(item));
      if (!atOp(",")) break;
      *had_comma = true;
      ++pos_;
    }
    SVM_RETURN_IF_ERROR(expectOp(close));
    return sealed(std::move(e));
  }

  Expected<ExprPtr> parseAtom() {
    const Token t = cur();
    switch (t.kind) {
      case TokenKind::Int: {
        ++pos_;
        ExprPtr e = newExpr(ExprKind::Int, t.line, t.col);
        e->int_value = t.int_value;
        return e;
      }
      case TokenKind::Float: {
        ++pos_;
        ExprPtr e = newExpr(ExprKind::Float, t.line, t.col);
        e->float_value = t.float_value;
        return e;
      }
      case TokenKind::String: {
        ExprPtr e = newExpr(ExprKind::Str, t.line, t.col);
        while (atKind(TokenKind::String)) e->name += toks_[pos_++].text;
        return e;
      }
      case TokenKind::Name: {
        if (t.text == "None" || t.text == "True" || t.text == "False") {
          ++pos_;
          ExprPtr e = newExpr(t.text == "None" ? ExprKind::None : ExprKind::Bool, t.line, t.col);
          e->bool_value = t.text == "True";
          return e;
        }
        if (t.text == "lambda" || t.text == "yield" || t.text == "await") return unsupported(t.text, t.line, t.col);
        if (isKeyword(t.text)) return syntaxError(fmt::format("unexpected '{}'", t.text));
        ++pos_;
        ExprPtr e = newExpr(ExprKind::Name, t.line, t.col);
        e->name = t.text;
        return e;
      }
      case TokenKind::Op: {
        if (t.text == "(") {
          ++pos_;
          if (atOp(")")) {
            ++pos_;
            return newExpr(ExprKind::Tuple, t.line, t.col);
          }
          bool had_comma = false;
          SVM_ASSIGN_OR_RETURN(ExprPtr e, parseSequence(")", ExprKind::Tuple, t.line, t.col, &had_comma));
          if (e->items.size() == 1 && !had_comma) return std::move(e->items[0]);
          return e;
        }
        if (t.text == "[") {
          ++pos_;
          bool had_comma = false;
          return parseSequence("]", ExprKind::List, t.line, t.col, &had_comma);
        }
        if (t.text == "{") return unsupported("dict/set literal", t.line, t.col);
        if (t.text == "...") return unsupported("...", t.line, t.col);
        return syntaxError(fmt::format("unexpected {}", describe(t)));
      }
      default:
        return syntaxError(fmt::format("unexpected {}", describe(t)));
    }
  }

  std::vector<Token> toks_;
  std::size_t pos_ = 0;
  int depth_ = 0;
  int max_nesting_;
};

}  // namespace

Expected<ModuleAst> parseModule(std::string_view source) {
  SVM_ASSIGN_OR_RETURN(std::vector<Token> tokens, tokenize(source));
  Parser parser(std::move(tokens));
  return parser.run();
}

}  // namespace shapevm::frontend
