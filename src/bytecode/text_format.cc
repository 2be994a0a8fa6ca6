// SPDX-License-Identifier: Apache-2.0
// .svasm assembler and canonical disassembler, plus the pseudocode view. Plain instructions go
// through one operand parser/printer per role letter of opcodes.def; CallOp, Call and register
// lists are the only special forms. Canonical output is what assemble() reads back unchanged.
#include "bytecode/text_format.h"

#include <charconv>
#include <cmath>
#include <map>
#include <optional>

#include "bytecode/builder.h"

namespace shapevm {
namespace {

// ---------------------------------------------------------------- printing helpers

std::string pcText(std::int64_t pc) { return fmt::format("0x{:04X}", pc); }


std::string floatText(double value) {
  std::string text = fmt::format("{}", value);  // shortest round-trip form
  if (text.find_first_of(".eEn") == std::string::npos) text += ".0";
  return text;
}

std::string tensorElementText(const Tensor& t, std::int64_t i) {
  const void* base = t.rawData();
  switch (t.dtype()) {
    case DType::Float32: return fmt::format("{}", static_cast<const float*>(base)[i]);
    case DType::Float16: return fmt::format("{}", halfToFloat(static_cast<const std::uint16_t*>(base)[i]));
    case DType::BFloat16: return fmt::format("{}", bf16ToFloat(static_cast<const std::uint16_t*>(base)[i]));
    case DType::Float64: return fmt::format("{}", static_cast<const double*>(base)[i]);
    case DType::Int32: return fmt::format("{}", static_cast<const std::int32_t*>(base)[i]);
    case DType::Int64: return fmt::format("{}", static_cast<const std::int64_t*>(base)[i]);
    case DType::Bool: return static_cast<const std::uint8_t*>(base)[i] ? "true" : "false";
  }
  return "?";
}

std::string registerText(std::int32_t r) { return r < 0 ? "none" : fmt::format("r{}", r); }

std::string registerListText(std::span<const std::int32_t> registers) {
  std::string text;
  for (std::size_t i = 0; i < registers.size(); ++i) text += (i ? ", " : "") + registerText(registers[i]);
  return text;
}

// The register list of a v/V instruction, or nullopt when the pool range is invalid.
std::optional<std::span<const std::int32_t>> poolList(const Function& fn, const Instruction& inst) {
  if (inst.b < 0 || inst.c < 0 || static_cast<std::size_t>(inst.b) + static_cast<std::size_t>(inst.c) > fn.operand_pool.size()) {
    return std::nullopt;
  }
  return std::span<const std::int32_t>(fn.operand_pool).subspan(static_cast<std::size_t>(inst.b),
                                                                 static_cast<std::size_t>(inst.c));
}

std::string paramKindText(const Param& param) {
  switch (param.kind) {
    case ValueKind::Int: return "int";
    case ValueKind::Float: return "float";
    case ValueKind::Bool: return "bool";
    case ValueKind::Tensor: return param.token.toString();
    default: return fmt::format("<bad kind {}>", static_cast<int>(param.kind));
  }
}

std::string attrsText(const OpSchema& schema, const OpSite& site, std::string_view open, std::string_view close) {
  std::string text;
  for (std::size_t i = 0; i < schema.attrs.size() && i < site.attrs.size() && i < 64; ++i) {
    if (!(site.attrs_given >> i & 1u)) continue;
    text += (text.empty() ? "" : ", ") + schema.attrs[i].name + "=" + site.attrs[i].toString();
  }
  return text.empty() ? text : std::string(open) + text + std::string(close);
}

std::string tokensText(const OpSite& site) {
  std::string text;
  for (std::size_t i = 0; i < site.input_tokens.size(); ++i) text += (i ? " x " : "") + site.input_tokens[i].toString();
  text += " ->";
  for (std::size_t i = 0; i < site.output_tokens.size(); ++i) text += (i ? ", " : " ") + site.output_tokens[i].toString();
  return text;
}

const OpSchema* siteSchema(const OpSite& site) {
  if (static_cast<int>(site.op) >= kNumOps) return nullptr;
  return &OpRegistry::global().schema(site.op);
}

// "CallOp matmul r3 = r1, r2 {..} : tokens" without the PC.
std::string callOpText(const Function& fn, const Instruction& inst, std::string_view token_text) {
  if (inst.a < 0 || static_cast<std::size_t>(inst.a) >= fn.op_sites.size()) return fmt::format("CallOp <bad site {}>", inst.a);
  const OpSite& site = fn.op_sites[static_cast<std::size_t>(inst.a)];
  const OpSchema* schema = siteSchema(site);
  if (schema == nullptr) return fmt::format("CallOp <bad op {}>", static_cast<int>(site.op));
  std::string text = fmt::format("CallOp {} {} = {}", schema->name, registerListText(site.outputs), registerListText(site.inputs));
  text += attrsText(*schema, site, " {", "}");
  if (!token_text.empty()) text += " : " + std::string(token_text);
  return text;
}

std::string callText(const Module& module, const Function& fn, const Instruction& inst) {
  if (inst.a < 0 || static_cast<std::size_t>(inst.a) >= fn.call_sites.size()) return fmt::format("Call <bad site {}>", inst.a);
  const CallSite& site = fn.call_sites[static_cast<std::size_t>(inst.a)];
  std::string callee = site.callee >= 0 && static_cast<std::size_t>(site.callee) < module.functions.size()
                           ? module.functions[static_cast<std::size_t>(site.callee)].name
                           : fmt::format("<bad function {}>", site.callee);
  std::string text = "Call " + callee;
  if (!site.results.empty()) text += " " + registerListText(site.results);
  text += " =";
  if (!site.args.empty()) text += " " + registerListText(site.args);
  return text;
}

// One plain instruction from its role letters, plus the trailing `; name/value` comment.
std::string plainText(const Module& module, const Function& fn, const Instruction& inst) {
  std::string text(opcodeName(inst.op));
  std::string comment;
  const std::int32_t fields[3] = {inst.a, inst.b, inst.c};
  bool first = true;
  for (int f = 0; f < 3; ++f) {
    OperandRole role = operandRole(inst.op, f);
    if (role == OperandRole::Unused) continue;
    std::string operand;
    switch (role) {
      case OperandRole::RegWrite:
      case OperandRole::RegRead: operand = fmt::format("r{}", fields[f]); break;
      case OperandRole::Constant:
        operand = fmt::format("k{}", fields[f]);
        if (fields[f] >= 0 && static_cast<std::size_t>(fields[f]) < module.constants.size()) {
          comment = constantText(module.constants[static_cast<std::size_t>(fields[f])]);
        }
        break;
      case OperandRole::Param:
        operand = fmt::format("p{}", fields[f]);
        if (fields[f] >= 0 && static_cast<std::size_t>(fields[f]) < fn.params.size()) {
          comment = fn.params[static_cast<std::size_t>(fields[f])].name;
        }
        break;
      case OperandRole::Output: operand = fmt::format("o{}", fields[f]); break;
      case OperandRole::Target: operand = "@" + pcText(fields[f]); break;
      case OperandRole::Loop: operand = fmt::format("l{}", fields[f]); break;
      case OperandRole::Immediate: operand = fmt::format("{}", fields[f]); break;
      case OperandRole::OpSite: operand = fmt::format("s{}", fields[f]); break;
      case OperandRole::CallSite: operand = fmt::format("c{}", fields[f]); break;
      case OperandRole::RegListRead:
      case OperandRole::RegListWrite: {
        auto list = poolList(fn, inst);
        operand = list ? "[" + registerListText(*list) + "]" : fmt::format("<bad list {}+{}>", inst.b, inst.c);
        f = 3;
        break;
      }
      case OperandRole::Unused: break;
    }
    text += (first ? " " : ", ") + operand;
    first = false;
  }
  if (!comment.empty()) text += "  ; " + comment;
  return text;
}

std::string instructionText(const Module& module, const Function& fn, const Instruction& inst) {
  if (static_cast<int>(inst.op) >= kNumOpcodes) return fmt::format("<bad opcode {}>", static_cast<int>(inst.op));
  if (inst.op == Opcode::CallOp) {
    std::string tokens;
    if (inst.a >= 0 && static_cast<std::size_t>(inst.a) < fn.op_sites.size()) {
      std::lock_guard<std::mutex> lock(module.tokenMutex());
      tokens = tokensText(fn.op_sites[static_cast<std::size_t>(inst.a)]);
    }
    return callOpText(fn, inst, tokens);
  }
  if (inst.op == Opcode::Call) return callText(module, fn, inst);
  return plainText(module, fn, inst);
}

// ---------------------------------------------------------------- parsing helpers

bool isIdentStart(char ch) { return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_'; }
bool isIdentChar(char ch) { return isIdentStart(ch) || (ch >= '0' && ch <= '9'); }

// A cursor over one line (comment already stripped); errors carry file:line:col.
class Cursor {
 public:
  Cursor(std::string_view file, int line, std::string_view text) : file_(file), line_(line), text_(text) {}

  Status error(std::string_view message) const { return errorAt(pos_, message); }
  Status errorAt(std::size_t pos, std::string_view message) const {
    return makeError(ErrorCode::ParseError, "{}:{}:{}: {}", file_, line_, pos + 1, message);
  }
  Status expected(std::string_view what) {
    skipSpace();
    return error(fmt::format("expected {}, got {}", what, atEnd() ? "end of line" : "'" + std::string(word()) + "'"));
  }
  // The next whitespace/punctuation-delimited chunk, for messages.
  std::string_view word() const {
    std::size_t end = pos_;
    while (end < text_.size() && text_[end] != ' ' && text_[end] != '\t' && text_[end] != ',') ++end;
    return text_.substr(pos_, std::max<std::size_t>(end - pos_, 1));
  }

  void skipSpace() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\r')) ++pos_;
  }
  bool atEnd() {
    skipSpace();
    return pos_ >= text_.size();
  }
  char peek() {
    skipSpace();
    return pos_ < text_.size() ? text_[pos_] : '\0';
  }
  bool consume(char ch) {
    if (peek() != ch) return false;
    ++pos_;
    return true;
  }
  bool consume(std::string_view s) {
    skipSpace();
    if (text_.substr(pos_, s.size()) != s) return false;
    pos_ += s.size();
    return true;
  }
  Status expect(char ch) {
    if (consume(ch)) return Status::ok();
    return expected(fmt::format("'{}'", ch));
  }
  Status expectEnd() {
    if (atEnd()) return Status::ok();
    return expected("end of line");
  }
  std::size_t pos() const { return pos_; }
  // Skips spaces and returns the position of the next item (for error columns).
  std::size_t mark() {
    skipSpace();
    return pos_;
  }
  void setPos(std::size_t pos) { pos_ = pos; }
  std::string_view rest() const { return text_.substr(pos_); }

  std::optional<std::string_view> ident() {
    skipSpace();
    if (pos_ >= text_.size() || !isIdentStart(text_[pos_])) return std::nullopt;
    std::size_t start = pos_;
    while (pos_ < text_.size() && isIdentChar(text_[pos_])) ++pos_;
    return text_.substr(start, pos_ - start);
  }
  Expected<std::string_view> expectIdent(std::string_view what) {
    auto id = ident();
    if (!id) return expected(what);
    return *id;
  }
  // A function name: identifiers joined by dots (`Cell.construct`, a method compiled by the frontend).
  Expected<std::string_view> expectFunctionName() {
    skipSpace();
    std::size_t start = pos_;
    SVM_ASSIGN_OR_RETURN(std::string_view first, expectIdent("a function name"));
    (void)first;
    while (pos_ + 1 < text_.size() && text_[pos_] == '.' && isIdentStart(text_[pos_ + 1])) {
      ++pos_;
      while (pos_ < text_.size() && isIdentChar(text_[pos_])) ++pos_;
    }
    return text_.substr(start, pos_ - start);
  }
  // A number-like chunk: [-+]?[0-9A-Za-z_.]* (ints, floats, hex, nan, inf).
  std::string_view numberChunk() {
    skipSpace();
    std::size_t start = pos_;
    if (pos_ < text_.size() && (text_[pos_] == '-' || text_[pos_] == '+')) ++pos_;
    while (pos_ < text_.size() && (isIdentChar(text_[pos_]) || text_[pos_] == '.' ||
                                   ((text_[pos_] == '-' || text_[pos_] == '+') && (text_[pos_ - 1] == 'e' || text_[pos_ - 1] == 'E')))) {
      ++pos_;
    }
    return text_.substr(start, pos_ - start);
  }
  Expected<std::int64_t> integer(std::string_view what) {
    skipSpace();
    std::size_t start = pos_;
    std::string_view chunk = numberChunk();
    std::int64_t value = 0;
    auto [end, ec] = std::from_chars(chunk.data(), chunk.data() + chunk.size(), value);
    if (chunk.empty() || ec != std::errc() || end != chunk.data() + chunk.size()) {
      pos_ = start;
      return expected(what);
    }
    return value;
  }
  Expected<std::int32_t> int32(std::string_view what) {
    std::size_t start = mark();
    SVM_ASSIGN_OR_RETURN(std::int64_t value, integer(what));
    if (value < INT32_MIN || value > INT32_MAX) return errorAt(start, fmt::format("{} {} is out of range", what, value));
    return static_cast<std::int32_t>(value);
  }
  Expected<double> floating(std::string_view what) {
    skipSpace();
    std::size_t start = pos_;
    std::string_view chunk = numberChunk();
    double value = 0;
    auto [end, ec] = std::from_chars(chunk.data(), chunk.data() + chunk.size(), value);
    if (chunk.empty() || ec != std::errc() || end != chunk.data() + chunk.size()) {
      pos_ = start;
      return expected(what);
    }
    return value;
  }
  // `<prefix><digits>` such as r3, k0, l1.
  Expected<std::int32_t> prefixed(char prefix, std::string_view what) {
    skipSpace();
    if (pos_ + 1 < text_.size() && text_[pos_] == prefix && text_[pos_ + 1] >= '0' && text_[pos_ + 1] <= '9') {
      std::size_t start = pos_;
      ++pos_;
      std::size_t digits = pos_;
      while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') ++pos_;
      if (pos_ < text_.size() && isIdentChar(text_[pos_])) {
        pos_ = start;
        return expected(what);
      }
      std::int64_t value = 0;
      auto [end, ec] = std::from_chars(text_.data() + digits, text_.data() + pos_, value);
      if (ec != std::errc() || value > INT32_MAX) return errorAt(start, fmt::format("{} number is out of range", what));
      return static_cast<std::int32_t>(value);
    }
    return expected(what);
  }
  Expected<std::string> quoted() {
    if (peek() != '"') return expected("a quoted string");
    ++pos_;
    std::string out;
    while (pos_ < text_.size() && text_[pos_] != '"') {
      char ch = text_[pos_++];
      if (ch != '\\') {
        out += ch;
        continue;
      }
      if (pos_ >= text_.size()) break;
      char esc = text_[pos_++];
      switch (esc) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case 'x': {
          unsigned value = 0;
          auto [end, ec] = pos_ + 2 <= text_.size() ? std::from_chars(text_.data() + pos_, text_.data() + pos_ + 2, value, 16)
                                                    : std::from_chars_result{nullptr, std::errc::invalid_argument};
          if (ec != std::errc() || end != text_.data() + pos_ + 2) return error("bad \\x escape: expected two hex digits");
          out += static_cast<char>(value);
          pos_ += 2;
          break;
        }
        default: return errorAt(pos_ - 2, fmt::format("unknown escape '\\{}' in string", esc));
      }
    }
    if (pos_ >= text_.size()) return error("unterminated string");
    ++pos_;
    return out;
  }
  // A shape token: `_` or [dtype][...].
  Expected<TensorDescriptor> token() {
    skipSpace();
    std::size_t start = pos_;
    if (pos_ < text_.size() && text_[pos_] == '_' && (pos_ + 1 >= text_.size() || !isIdentChar(text_[pos_ + 1]))) {
      ++pos_;
      return TensorDescriptor::notTensor();
    }
    while (pos_ < text_.size() && isIdentChar(text_[pos_])) ++pos_;
    if (pos_ >= text_.size() || text_[pos_] != '[') {
      pos_ = start;
      return expected("a shape token ([dims], dtype[dims] or _)");
    }
    std::size_t close = text_.find(']', pos_);
    if (close == std::string_view::npos) return errorAt(start, "unterminated shape token (missing ']')");
    pos_ = close + 1;
    auto parsed = parseTensorDescriptor(text_.substr(start, pos_ - start));
    if (!parsed) return errorAt(start, parsed.status().message());
    return parsed;
  }

 private:
  std::string_view file_;
  int line_;
  std::string_view text_;
  std::size_t pos_ = 0;
};

// Strips a `;` comment that is outside a string literal.
std::string_view stripComment(std::string_view line) {
  bool in_string = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    char ch = line[i];
    if (in_string) {
      if (ch == '\\') ++i;
      else if (ch == '"') in_string = false;
    } else if (ch == '"') {
      in_string = true;
    } else if (ch == ';') {
      return line.substr(0, i);
    }
  }
  return line;
}

Expected<double> parseFloatWord(Cursor& cur, std::string_view what) { return cur.floating(what); }

Status storeElement(Tensor& t, std::int64_t i, Cursor& cur) {
  void* base = t.rawData();
  std::size_t start = cur.pos();
  switch (t.dtype()) {
    case DType::Float32:
    case DType::Float16:
    case DType::BFloat16: {
      std::string_view chunk = cur.numberChunk();
      float value = 0;
      auto [end, ec] = std::from_chars(chunk.data(), chunk.data() + chunk.size(), value);
      if (chunk.empty() || ec != std::errc() || end != chunk.data() + chunk.size()) {
        cur.setPos(start);
        return cur.expected("a float element");
      }
      if (t.dtype() == DType::Float32) static_cast<float*>(base)[i] = value;
      else if (t.dtype() == DType::Float16) static_cast<std::uint16_t*>(base)[i] = floatToHalf(value);
      else static_cast<std::uint16_t*>(base)[i] = floatToBf16(value);
      return Status::ok();
    }
    case DType::Float64: {
      SVM_ASSIGN_OR_RETURN(double value, parseFloatWord(cur, "a float element"));
      static_cast<double*>(base)[i] = value;
      return Status::ok();
    }
    case DType::Int32: {
      SVM_ASSIGN_OR_RETURN(std::int32_t value, cur.int32("an int32 element"));
      static_cast<std::int32_t*>(base)[i] = value;
      return Status::ok();
    }
    case DType::Int64: {
      SVM_ASSIGN_OR_RETURN(std::int64_t value, cur.integer("an int element"));
      static_cast<std::int64_t*>(base)[i] = value;
      return Status::ok();
    }
    case DType::Bool: {
      auto word = cur.ident();
      if (!word || (*word != "true" && *word != "false")) {
        cur.setPos(start);
        return cur.expected("true or false");
      }
      static_cast<std::uint8_t*>(base)[i] = *word == "true" ? 1 : 0;
      return Status::ok();
    }
  }
  return cur.error("bad dtype");
}

Expected<Constant> parseConstantValue(Cursor& cur) {
  SVM_ASSIGN_OR_RETURN(std::string_view kind, cur.expectIdent("a constant kind (none, int, float, bool, string, ints, tensor)"));
  Constant c;
  if (kind == "none") {
    c.kind = ConstKind::None;
  } else if (kind == "int") {
    SVM_ASSIGN_OR_RETURN(std::int64_t value, cur.integer("an int value"));
    c = Constant{ConstKind::Int, Value::fromInt(value), ""};
  } else if (kind == "float") {
    SVM_ASSIGN_OR_RETURN(double value, cur.floating("a float value"));
    c = Constant{ConstKind::Float, Value::fromFloat(value), ""};
  } else if (kind == "bool") {
    std::size_t start = cur.pos();
    auto word = cur.ident();
    if (!word || (*word != "true" && *word != "false")) {
      cur.setPos(start);
      return cur.expected("true or false");
    }
    c = Constant{ConstKind::Bool, Value::fromBool(*word == "true"), ""};
  } else if (kind == "string") {
    SVM_ASSIGN_OR_RETURN(std::string text, cur.quoted());
    c = Constant{ConstKind::String, Value(), std::move(text)};
  } else if (kind == "ints") {
    SVM_RETURN_IF_ERROR(cur.expect('['));
    std::vector<std::int64_t> values;
    if (!cur.consume(']')) {
      do {
        SVM_ASSIGN_OR_RETURN(std::int64_t value, cur.integer("an int"));
        values.push_back(value);
      } while (cur.consume(','));
      SVM_RETURN_IF_ERROR(cur.expect(']'));
    }
    c = Constant{ConstKind::Ints, Value::fromInts(values), ""};
  } else if (kind == "tensor") {
    std::size_t start = cur.pos();
    SVM_ASSIGN_OR_RETURN(TensorDescriptor token, cur.token());
    Shape shape;
    bool ok = token.is_tensor && token.dtype && !token.any_rank;
    for (const DimToken& d : token.dims) {
      ok = ok && d.is_static;
      if (ok) shape.push_back(d.size);
    }
    if (!ok) return cur.errorAt(start, "expected a tensor type with a dtype and static dims, e.g. f32[2,2]");
    auto tensor = Tensor::empty(*token.dtype, shape);
    if (!tensor) return cur.errorAt(start, tensor.status().message());
    SVM_RETURN_IF_ERROR(cur.expect('{'));
    std::int64_t count = 0;
    if (!cur.consume('}')) {
      do {
        if (count >= shape.numel()) return cur.error(fmt::format("too many elements for {} (expected {})", token.toString(), shape.numel()));
        SVM_RETURN_IF_ERROR(storeElement(*tensor, count, cur));
        ++count;
      } while (cur.consume(','));
      SVM_RETURN_IF_ERROR(cur.expect('}'));
    }
    if (count != shape.numel()) {
      return cur.error(fmt::format("{} needs {} elements, got {}", token.toString(), shape.numel(), count));
    }
    c = Constant{ConstKind::Tensor, Value::fromTensor(std::move(*tensor)), ""};
  } else {
    return cur.error(fmt::format("unknown constant kind '{}' (expected none, int, float, bool, string, ints, tensor)", kind));
  }
  return c;
}

Expected<AttrValue> parseAttrValue(Cursor& cur) {
  if (cur.consume('[')) {
    std::vector<std::int64_t> values;
    if (!cur.consume(']')) {
      do {
        SVM_ASSIGN_OR_RETURN(std::int64_t value, cur.integer("an int in the list"));
        values.push_back(value);
      } while (cur.consume(','));
      SVM_RETURN_IF_ERROR(cur.expect(']'));
    }
    return AttrValue::ofInts(std::move(values));
  }
  std::size_t start = cur.pos();
  if (auto word = cur.ident()) {
    if (*word == "true" || *word == "false") return AttrValue::ofBool(*word == "true");
    if (*word == "nan" || *word == "inf") return AttrValue::ofFloat(*word == "nan" ? std::nan("") : INFINITY);
    if (auto dtype = parseDType(*word)) return AttrValue::ofDType(*dtype);
    return cur.errorAt(start, fmt::format("expected an attribute value (int, float, bool, [ints] or dtype), got '{}'", *word));
  }
  std::string_view chunk = cur.numberChunk();
  cur.setPos(start);
  if (chunk.find_first_of(".eEn") != std::string_view::npos) {
    SVM_ASSIGN_OR_RETURN(double value, cur.floating("an attribute value"));
    return AttrValue::ofFloat(value);
  }
  SVM_ASSIGN_OR_RETURN(std::int64_t value, cur.integer("an attribute value (int, float, bool, [ints] or dtype)"));
  return AttrValue::ofInt(value);
}

// ---------------------------------------------------------------- the assembler

class Assembler {
 public:
  Assembler(std::string_view text, std::string_view file) : text_(text), file_(file) {}

  Expected<Module> run() {
    std::size_t start = 0;
    int line_number = 0;
    while (start <= text_.size()) {
      std::size_t end = text_.find('\n', start);
      if (end == std::string_view::npos) end = text_.size();
      ++line_number;
      current_line_ = line_number;
      Cursor cur(file_, line_number, stripComment(text_.substr(start, end - start)));
      if (!cur.atEnd()) SVM_RETURN_IF_ERROR(line(cur));
      start = end + 1;
    }
    if (function_ != nullptr) {
      return makeError(ErrorCode::ParseError, "{}:{}:1: function '{}' has no '.end' before the end of the file", file_,
                       function_line_, function_->name());
    }
    for (const PendingCall& call : calls_) {
      if (builder_.findFunction(call.callee) < 0) {
        return makeError(ErrorCode::ParseError, "{}:{}:{}: unknown function '{}'", file_, call.line, call.col, call.callee);
      }
    }
    auto module = builder_.finish();
    if (!module) return makeError(ErrorCode::ParseError, "{}: {}", file_, module.status().message());
    return module;
  }

 private:
  struct PendingCall {
    std::string callee;
    int line, col;
  };
  struct LabelUse {
    Label label;
    int line = 0, col = 0;
    bool bound = false;
  };

  Status line(Cursor& cur) {
    if (cur.peek() == '.') return directive(cur);
    if (function_ == nullptr) return cur.expected("a directive (.module, .source, .const, .func)");
    // Optional PC prefix.
    if (cur.rest().substr(0, 2) == "0x" || cur.rest().substr(0, 2) == "0X") {
      std::size_t start = cur.pos();
      cur.setPos(start + 2);
      std::string_view digits = cur.numberChunk();
      std::int64_t pc = -1;
      auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), pc, 16);
      if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size()) {
        cur.setPos(start);
        return cur.expected("a PC prefix 0xNNNN");
      }
      if (pc != function_->pc()) {
        return cur.errorAt(start, fmt::format("PC prefix {} does not match the instruction's PC {}", pcText(pc), pcText(function_->pc())));
      }
    }
    if (cur.atEnd()) return cur.expected("an instruction");
    std::size_t start = cur.mark();
    SVM_ASSIGN_OR_RETURN(std::string_view name, cur.expectIdent("an opcode or a label"));
    if (cur.consume(':')) {
      LabelUse& label = labelNamed(name, start);
      if (label.bound) return cur.errorAt(start, fmt::format("label '{}' defined twice", name));
      label.bound = true;
      SVM_RETURN_IF_ERROR(function_->bind(label.label));
      if (cur.atEnd()) return Status::ok();
      start = cur.mark();
      SVM_ASSIGN_OR_RETURN(name, cur.expectIdent("an opcode"));
    }
    auto op = parseOpcode(name);
    if (!op) return cur.errorAt(start, fmt::format("unknown opcode '{}'", name));
    if (*op == Opcode::CallOp) return callOp(cur);
    if (*op == Opcode::Call) return call(cur);
    return plain(cur, *op);
  }

  // The label called `name`, created at its first mention (position kept for errors).
  LabelUse& labelNamed(std::string_view name, std::size_t pos) {
    auto it = labels_.find(std::string(name));
    if (it == labels_.end()) {
      LabelUse use{function_->newLabel(std::string(name)), current_line_, static_cast<int>(pos) + 1, false};
      it = labels_.emplace(std::string(name), use).first;
    }
    return it->second;
  }

  Status plain(Cursor& cur, Opcode op) {
    std::int32_t fields[3] = {0, 0, 0};
    const int at = function_->pc();
    bool first = true;
    for (int f = 0; f < 3; ++f) {
      OperandRole role = operandRole(op, f);
      if (role == OperandRole::Unused) continue;
      if (!first) SVM_RETURN_IF_ERROR(cur.expect(','));
      first = false;
      switch (role) {
        case OperandRole::RegWrite:
        case OperandRole::RegRead: {
          SVM_ASSIGN_OR_RETURN(fields[f], cur.prefixed('r', "a register (rN)"));
          break;
        }
        case OperandRole::Constant: {
          SVM_ASSIGN_OR_RETURN(fields[f], constantRef(cur));
          break;
        }
        case OperandRole::Param: {
          SVM_ASSIGN_OR_RETURN(fields[f], paramRef(cur));
          break;
        }
        case OperandRole::Output: {
          SVM_ASSIGN_OR_RETURN(fields[f], cur.prefixed('o', "an output slot (oN)"));
          break;
        }
        case OperandRole::Loop: {
          SVM_ASSIGN_OR_RETURN(fields[f], cur.prefixed('l', "a loop id (lN)"));
          break;
        }
        case OperandRole::OpSite: {
          SVM_ASSIGN_OR_RETURN(fields[f], cur.prefixed('s', "an op site (sN)"));
          break;
        }
        case OperandRole::CallSite: {
          SVM_ASSIGN_OR_RETURN(fields[f], cur.prefixed('c', "a call site (cN)"));
          break;
        }
        case OperandRole::Immediate: {
          SVM_ASSIGN_OR_RETURN(fields[f], cur.int32("an integer"));
          break;
        }
        case OperandRole::Target: {
          if (!cur.consume('@')) return cur.expected("a jump target (@0xNNNN or @label)");
          if (cur.rest().substr(0, 2) == "0x" || cur.rest().substr(0, 2) == "0X") {
            std::size_t start = cur.pos();
            cur.setPos(start + 2);
            std::string_view digits = cur.numberChunk();
            std::int64_t target = 0;
            auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), target, 16);
            if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size() || target > INT32_MAX) {
              cur.setPos(start);
              return cur.expected("a jump target (@0xNNNN or @label)");
            }
            fields[f] = static_cast<std::int32_t>(target);
          } else {
            std::size_t start = cur.mark();
            SVM_ASSIGN_OR_RETURN(std::string_view name, cur.expectIdent("a jump target (@0xNNNN or @label)"));
            function_->useLabel(labelNamed(name, start).label, at, f);
          }
          break;
        }
        case OperandRole::RegListRead:
        case OperandRole::RegListWrite: {
          SVM_RETURN_IF_ERROR(cur.expect('['));
          std::vector<std::int32_t> list;
          if (!cur.consume(']')) {
            do {
              SVM_ASSIGN_OR_RETURN(std::int32_t r, cur.prefixed('r', "a register (rN)"));
              list.push_back(r);
            } while (cur.consume(','));
            SVM_RETURN_IF_ERROR(cur.expect(']'));
          }
          fields[1] = function_->addRegisterList(list);
          fields[2] = static_cast<std::int32_t>(list.size());
          f = 3;
          break;
        }
        case OperandRole::Unused: break;
      }
    }
    SVM_RETURN_IF_ERROR(cur.expectEnd());
    function_->emit(op, fields[0], fields[1], fields[2]);
    return Status::ok();
  }

  Expected<std::int32_t> constantRef(Cursor& cur) {
    std::size_t start = cur.mark();
    auto by_index = cur.prefixed('k', "a constant");
    if (by_index) return by_index;
    cur.setPos(start);
    auto name = cur.ident();
    if (!name) return cur.expected("a constant (kN or a constant name)");
    auto it = constant_names_.find(std::string(*name));
    if (it == constant_names_.end()) return cur.errorAt(start, fmt::format("unknown constant '{}'", *name));
    return it->second;
  }

  Expected<std::int32_t> paramRef(Cursor& cur) {
    std::size_t start = cur.mark();
    auto by_index = cur.prefixed('p', "a parameter");
    if (by_index) return by_index;
    cur.setPos(start);
    auto name = cur.ident();
    if (!name) return cur.expected("a parameter (pN or a parameter name)");
    int index = function_->function().paramIndex(*name);
    if (index < 0) return cur.errorAt(start, fmt::format("unknown parameter '{}' in function '{}'", *name, function_->name()));
    return index;
  }

  // Comma-separated registers (or `none` when allow_none) up to a stop character / end.
  Expected<std::vector<std::int32_t>> registers(Cursor& cur, bool allow_none, std::string_view stops) {
    std::vector<std::int32_t> out;
    char next = cur.peek();
    if (next == '\0' || stops.find(next) != std::string_view::npos) return out;
    do {
      std::size_t start = cur.pos();
      if (auto word = cur.ident(); allow_none && word && *word == "none") {
        out.push_back(-1);
        continue;
      }
      cur.setPos(start);
      SVM_ASSIGN_OR_RETURN(std::int32_t r, cur.prefixed('r', allow_none ? "a register (rN) or none" : "a register (rN)"));
      out.push_back(r);
    } while (cur.consume(','));
    return out;
  }

  Status callOp(Cursor& cur) {
    std::size_t op_pos = cur.pos();
    SVM_ASSIGN_OR_RETURN(std::string_view op_name, cur.expectIdent("an op name"));
    op_pos = cur.pos() - op_name.size();
    const OpSchema* schema = OpRegistry::global().find(op_name);
    if (schema == nullptr) return cur.errorAt(op_pos, fmt::format("unknown op '{}'", op_name));
    SVM_ASSIGN_OR_RETURN(std::vector<std::int32_t> outputs, registers(cur, false, "="));
    SVM_RETURN_IF_ERROR(cur.expect('='));
    SVM_ASSIGN_OR_RETURN(std::vector<std::int32_t> inputs, registers(cur, true, "{:"));
    NamedAttrs attrs;
    if (cur.consume('{')) {
      if (!cur.consume('}')) {
        do {
          SVM_ASSIGN_OR_RETURN(std::string_view name, cur.expectIdent("an attribute name"));
          SVM_RETURN_IF_ERROR(cur.expect('='));
          SVM_ASSIGN_OR_RETURN(AttrValue value, parseAttrValue(cur));
          attrs.emplace_back(std::string(name), std::move(value));
        } while (cur.consume(','));
        SVM_RETURN_IF_ERROR(cur.expect('}'));
      }
    }
    std::vector<TensorDescriptor> in_tokens, out_tokens;
    if (cur.consume(':')) {
      do {
        SVM_ASSIGN_OR_RETURN(TensorDescriptor t, cur.token());
        in_tokens.push_back(std::move(t));
      } while (cur.consume('x'));
      if (!cur.consume("->")) return cur.expected("'x' or '->' between shape tokens");
      do {
        SVM_ASSIGN_OR_RETURN(TensorDescriptor t, cur.token());
        out_tokens.push_back(std::move(t));
      } while (cur.consume(','));
    }
    SVM_RETURN_IF_ERROR(cur.expectEnd());
    auto pc = function_->emitCallOp(op_name, std::move(inputs), std::move(outputs), attrs, std::move(in_tokens),
                                    std::move(out_tokens));
    if (!pc) return cur.errorAt(op_pos, pc.status().message());
    return Status::ok();
  }

  Status call(Cursor& cur) {
    std::size_t start = cur.pos();
    SVM_ASSIGN_OR_RETURN(std::string_view callee, cur.expectFunctionName());
    start = cur.pos() - callee.size();
    SVM_ASSIGN_OR_RETURN(std::vector<std::int32_t> results, registers(cur, false, "="));
    SVM_RETURN_IF_ERROR(cur.expect('='));
    SVM_ASSIGN_OR_RETURN(std::vector<std::int32_t> args, registers(cur, false, ""));
    SVM_RETURN_IF_ERROR(cur.expectEnd());
    calls_.push_back(PendingCall{std::string(callee), current_line_, static_cast<int>(start) + 1});
    function_->emitCall(std::string(callee), std::move(args), std::move(results));
    return Status::ok();
  }

  Status directive(Cursor& cur) {
    std::size_t start = cur.pos();
    cur.consume('.');
    SVM_ASSIGN_OR_RETURN(std::string_view name, cur.expectIdent("a directive name"));
    if (function_ == nullptr) {
      if (name == "module" || name == "source") {
        SVM_ASSIGN_OR_RETURN(std::string text, cur.quoted());
        if (name == "module") builder_.setName(std::move(text));
        else builder_.setSourceFile(std::move(text));
      } else if (name == "const") {
        SVM_RETURN_IF_ERROR(constDirective(cur));
      } else if (name == "func") {
        std::size_t name_pos = cur.mark();
        SVM_ASSIGN_OR_RETURN(std::string_view fn_name, cur.expectFunctionName());
        if (builder_.findFunction(fn_name) >= 0) return cur.errorAt(name_pos, fmt::format("function '{}' defined twice", fn_name));
        function_ = &builder_.addFunction(std::string(fn_name));
        function_line_ = current_line_;
        labels_.clear();
      } else {
        return cur.errorAt(start, fmt::format("unknown directive '.{}' (expected .module, .source, .const or .func)", name));
      }
      return cur.expectEnd();
    }
    if (name == "param") {
      SVM_ASSIGN_OR_RETURN(std::string_view param, cur.expectIdent("a parameter name"));
      SVM_RETURN_IF_ERROR(cur.expect(':'));
      std::size_t type_pos = cur.mark();
      auto word = cur.ident();
      if (word && cur.rest().substr(0, 1) != "[" && (*word == "int" || *word == "float" || *word == "bool")) {
        function_->addParam(std::string(param), *word == "int" ? ValueKind::Int : *word == "float" ? ValueKind::Float : ValueKind::Bool);
      } else {
        cur.setPos(type_pos);
        SVM_ASSIGN_OR_RETURN(TensorDescriptor token, cur.token());
        if (!token.is_tensor) return cur.errorAt(type_pos, "expected int, float, bool or a tensor shape token");
        function_->addParam(std::string(param), ValueKind::Tensor, std::move(token));
      }
    } else if (name == "dim") {
      SVM_RETURN_IF_ERROR(cur.expect('?'));
      SVM_ASSIGN_OR_RETURN(std::int32_t id, cur.int32("a dim id"));
      std::string dim_name;
      if (!cur.atEnd()) {
        SVM_ASSIGN_OR_RETURN(std::string_view n, cur.expectIdent("a dim name"));
        dim_name = std::string(n);
      }
      if (id < 0 || id > 1000000) return cur.errorAt(start, fmt::format("bad dim id {}", id));
      function_->declareDim(id, std::move(dim_name));
    } else if (name == "outputs" || name == "registers" || name == "loops") {
      std::size_t value_pos = cur.mark();
      SVM_ASSIGN_OR_RETURN(std::int32_t count, cur.int32("a count"));
      if (count < 0) return cur.errorAt(value_pos, fmt::format("expected a count >= 0, got {}", count));
      if (name == "outputs") function_->setOutputs(count);
      else if (name == "registers") function_->setRegisters(count);
      else function_->setLoops(count);
    } else if (name == "loc") {
      SVM_ASSIGN_OR_RETURN(std::int32_t line, cur.int32("a source line"));
      std::int32_t col = 0;
      if (!cur.atEnd()) {
        SVM_ASSIGN_OR_RETURN(col, cur.int32("a source column"));
      }
      function_->setLoc(SourceLoc{line, col});
    } else if (name == "end") {
      for (const auto& [label_name, label] : labels_) {
        if (!label.bound) {
          return makeError(ErrorCode::ParseError, "{}:{}:{}: label '{}' is used but never defined", file_, label.line,
                           label.col, label_name);
        }
      }
      function_ = nullptr;
    } else {
      return cur.errorAt(start,
                         fmt::format("unknown directive '.{}' inside a function (expected .param, .dim, .outputs, "
                                     ".registers, .loops, .loc or .end)",
                                     name));
    }
    return cur.expectEnd();
  }

  Status constDirective(Cursor& cur) {
    std::size_t name_pos = cur.mark();
    SVM_ASSIGN_OR_RETURN(std::string_view name, cur.expectIdent("a constant name (kN)"));
    const int index = builder_.numConstants();
    if (name.size() > 1 && name[0] == 'k' && name.find_first_not_of("0123456789", 1) == std::string_view::npos) {
      if (name != fmt::format("k{}", index)) {
        return cur.errorAt(name_pos, fmt::format("constant '{}' declared at index {} (expected k{})", name, index, index));
      }
    } else if (!constant_names_.emplace(std::string(name), index).second) {
      return cur.errorAt(name_pos, fmt::format("constant '{}' declared twice", name));
    }
    SVM_RETURN_IF_ERROR(cur.expect('='));
    SVM_ASSIGN_OR_RETURN(Constant constant, parseConstantValue(cur));
    builder_.addConstant(std::move(constant));
    return Status::ok();
  }

  std::string_view text_;
  std::string_view file_;
  ModuleBuilder builder_;
  FunctionBuilder* function_ = nullptr;
  std::map<std::string, int> constant_names_;
  std::map<std::string, LabelUse> labels_;
  std::vector<PendingCall> calls_;
  int current_line_ = 0;
  int function_line_ = 0;  // where the open `.func` is
};

}  // namespace

std::string constantText(const Constant& constant) {
  switch (constant.kind) {
    case ConstKind::None: return "none";
    case ConstKind::Int: return fmt::format("int {}", constant.value.isInt() ? constant.value.asInt() : 0);
    case ConstKind::Float: return "float " + floatText(constant.value.isFloat() ? constant.value.asFloat() : 0.0);
    case ConstKind::Bool: return constant.value.isBool() && constant.value.asBool() ? "bool true" : "bool false";
    case ConstKind::String: return "string " + quoteString(constant.text);
    case ConstKind::Ints: {
      std::string text = "ints [";
      if (constant.value.isTuple()) {
        auto items = constant.value.tuple();
        for (std::size_t i = 0; i < items.size(); ++i) text += (i ? "," : "") + fmt::format("{}", items[i].isInt() ? items[i].asInt() : 0);
      }
      return text + "]";
    }
    case ConstKind::Tensor: {
      if (!constant.value.isTensor()) return "tensor <missing>";
      auto contiguous = constant.value.tensor().contiguous();
      if (!contiguous) return "tensor <unreadable>";
      const Tensor& t = *contiguous;
      std::string text = fmt::format("tensor {}{} {{", dtypeShortName(t.dtype()), t.shape().toString());
      for (std::int64_t i = 0; i < t.numel(); ++i) text += (i ? ", " : "") + tensorElementText(t, i);
      return text + "}";
    }
  }
  return "<bad constant>";
}

Expected<Module> assemble(std::string_view text, std::string_view filename) {
  Assembler assembler(text, filename);
  return assembler.run();
}

namespace {

// Line `line` (1-based) of `text` without its indentation; "" when out of range.
std::string sourceLineText(std::string_view text, int line) {
  std::size_t start = 0;
  for (int current = 1; current < line; ++current) {
    std::size_t nl = text.find('\n', start);
    if (nl == std::string_view::npos) return "";
    start = nl + 1;
  }
  std::size_t end = text.find('\n', start);
  std::string_view row = text.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start);
  std::size_t first = row.find_first_not_of(" \t");
  std::size_t last = row.find_last_not_of(" \t\r");
  return first == std::string_view::npos ? "" : std::string(row.substr(first, last - first + 1));
}

}  // namespace

std::string disassembleFunction(const Module& module, int function) {
  return disassembleFunction(module, function, DisassembleOptions{});
}

std::string disassemble(const Module& module) { return disassemble(module, DisassembleOptions{}); }

std::string disassembleFunction(const Module& module, int function, const DisassembleOptions& options) {
  const Function& fn = module.functions[static_cast<std::size_t>(function)];
  int shown_line = 0;
  std::string out = fmt::format(".func {}\n", fn.name);
  for (const Param& param : fn.params) out += fmt::format("  .param {} : {}\n", param.name, paramKindText(param));
  for (std::size_t i = 0; i < fn.dim_names.size(); ++i) {
    out += fn.dim_names[i].empty() ? fmt::format("  .dim ?{}\n", i) : fmt::format("  .dim ?{} {}\n", i, fn.dim_names[i]);
  }
  out += fmt::format("  .outputs {}\n  .registers {}\n", fn.num_outputs, fn.num_registers);
  if (fn.num_loops != 0) out += fmt::format("  .loops {}\n", fn.num_loops);
  SourceLoc loc;
  for (std::size_t pc = 0; pc < fn.code.size(); ++pc) {
    SourceLoc here = pc < fn.locs.size() ? fn.locs[pc] : SourceLoc{};
    if (!(here == loc)) {
      if (!options.source_text.empty() && here.line > 0 && here.line != shown_line) {
        std::string text = sourceLineText(options.source_text, here.line);
        for (char& ch : text) {
          if (static_cast<unsigned char>(ch) < 0x20) ch = ' ';
        }
        out += fmt::format("  ; {}: {}\n", here.line, text);
        shown_line = here.line;
      }
      out += fmt::format("  .loc {} {}\n", here.line, here.col);
      loc = here;
    }
    out += fmt::format("  {}  {}\n", pcText(static_cast<std::int64_t>(pc)), instructionText(module, fn, fn.code[pc]));
  }
  return out + ".end\n";
}

std::string disassemble(const Module& module, const DisassembleOptions& options) {
  std::string out = fmt::format(".module {}\n", quoteString(module.name));
  if (!module.source_file.empty()) out += fmt::format(".source {}\n", quoteString(module.source_file));
  for (std::size_t i = 0; i < module.constants.size(); ++i) {
    out += fmt::format(".const k{} = {}\n", i, constantText(module.constants[i]));
  }
  for (std::size_t i = 0; i < module.functions.size(); ++i) {
    out += "\n" + disassembleFunction(module, static_cast<int>(i), options);
  }
  return out;
}

std::string quoteString(std::string_view text) {
  std::string out = "\"";
  for (char ch : text) {
    auto byte = static_cast<unsigned char>(ch);
    switch (ch) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (byte < 0x20 || byte >= 0x7f) {
          out += fmt::format("\\x{:02x}", byte);
        } else {
          out += ch;
        }
    }
  }
  return out + "\"";
}

}  // namespace shapevm
