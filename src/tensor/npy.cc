// SPDX-License-Identifier: Apache-2.0
// .npy/.npz reading and writing. Reading goes through one path (loadNpy over a ByteSource: a
// memory span, a file or an npz member) that validates the preamble, parses the header dict as
// the Python literal it is, and reads the data straight into the tensor's storage.
// Invariant: every length and extent from the file is checked before it is used.
#include "shapevm/npy.h"

#include <zip.h>

#include <algorithm>
#include <bit>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <optional>

namespace shapevm {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr std::size_t kMagicSize = 6;
constexpr int kMaxLiteralDepth = 32;
constexpr bool kHostLittleEndian = std::endian::native == std::endian::little;

// ---- Byte sources ----

// A sequential reader that knows how many bytes are left.
class ByteSource {
 public:
  virtual ~ByteSource() = default;
  // Reads exactly `count` bytes or fails (the caller checked remaining() first).
  virtual Status read(void* destination, std::size_t count) = 0;
  virtual std::uint64_t remaining() const = 0;
};

class SpanSource final : public ByteSource {
 public:
  explicit SpanSource(std::span<const std::uint8_t> bytes) : bytes_(bytes) {}
  Status read(void* destination, std::size_t count) override {
    if (count > bytes_.size() - position_) return makeError(ErrorCode::BadFormat, "unexpected end of data");
    if (count) std::memcpy(destination, bytes_.data() + position_, count);
    position_ += count;
    return Status::ok();
  }
  std::uint64_t remaining() const override { return bytes_.size() - position_; }

 private:
  std::span<const std::uint8_t> bytes_;
  std::size_t position_ = 0;
};

struct FileCloser {
  void operator()(std::FILE* file) const { std::fclose(file); }
};
using FilePtr = std::unique_ptr<std::FILE, FileCloser>;

class FileSource final : public ByteSource {
 public:
  FileSource(std::FILE* file, std::uint64_t size) : file_(file), remaining_(size) {}
  Status read(void* destination, std::size_t count) override {
    std::size_t got = count ? std::fread(destination, 1, count, file_) : 0;
    if (got != count) {
      return makeError(ErrorCode::IoError, "read failed after {} of {} bytes: {}", got, count,
                       std::ferror(file_) ? std::strerror(errno) : "unexpected end of file");
    }
    remaining_ -= count;
    return Status::ok();
  }
  std::uint64_t remaining() const override { return remaining_; }

 private:
  std::FILE* file_;
  std::uint64_t remaining_;
};

class ZipMemberSource final : public ByteSource {
 public:
  ZipMemberSource(zip_file_t* file, std::uint64_t size) : file_(file), remaining_(size) {}
  Status read(void* destination, std::size_t count) override {
    auto* out = static_cast<std::uint8_t*>(destination);
    std::size_t done = 0;
    while (done < count) {
      zip_int64_t got = zip_fread(file_, out + done, count - done);
      if (got < 0) {
        return makeError(ErrorCode::BadFormat, "cannot read member data: {}", zip_error_strerror(zip_file_get_error(file_)));
      }
      if (got == 0) return makeError(ErrorCode::BadFormat, "member data ends early ({} of {} bytes)", done, count);
      done += static_cast<std::size_t>(got);
    }
    remaining_ -= count;
    return Status::ok();
  }
  std::uint64_t remaining() const override { return remaining_; }
  // Reading past the end makes libzip check the CRC; anything but a clean end is an error.
  Status checkEnd() {
    std::uint8_t extra = 0;
    zip_int64_t got = zip_fread(file_, &extra, 1);
    if (got < 0) return makeError(ErrorCode::BadFormat, "member is corrupt: {}", zip_error_strerror(zip_file_get_error(file_)));
    if (got > 0) return makeError(ErrorCode::BadFormat, "member holds more data than its recorded size");
    return Status::ok();
  }

 private:
  zip_file_t* file_;
  std::uint64_t remaining_;
};

// ---- The header: a Python dict literal ----

struct Literal {
  enum class Kind : std::uint8_t { String, Int, Bool, None, Tuple, List, Dict };
  Kind kind = Kind::None;
  std::string text;           // String
  std::int64_t number = 0;    // Int
  bool flag = false;          // Bool
  std::vector<Literal> items; // Tuple, List; Dict as key, value, key, value, ...
  std::string_view source;    // the literal's own text, for messages
};

// Recursive descent over the subset of Python literals numpy writes (and a bit more, so that
// structured dtypes are recognised and rejected by name rather than as syntax errors).
class LiteralParser {
 public:
  explicit LiteralParser(std::string_view text) : text_(text) {}

  Expected<Literal> parseDocument() {
    Literal out;
    SVM_RETURN_IF_ERROR(parseValue(out, 0));
    skipSpace();
    if (position_ != text_.size()) return error("unexpected text after the closing brace");
    return out;
  }

 private:
  Status error(std::string_view what) const {
    return makeError(ErrorCode::BadFormat, "bad header at offset {}: {}", position_, what);
  }
  void skipSpace() {
    while (position_ < text_.size() &&
           (text_[position_] == ' ' || text_[position_] == '\t' || text_[position_] == '\n' || text_[position_] == '\r')) {
      ++position_;
    }
  }
  bool atEnd() const { return position_ >= text_.size(); }
  char peek() const { return text_[position_]; }

  Status parseValue(Literal& out, int depth) {
    if (depth > kMaxLiteralDepth) return error("nesting too deep");
    skipSpace();
    if (atEnd()) return error("unexpected end of header");
    const std::size_t start = position_;
    const char c = peek();
    Status status;
    if (c == '\'' || c == '"') {
      status = parseString(out);
    } else if (c == '(' || c == '[' || c == '{') {
      status = parseSequence(out, depth);
    } else if (c == '-' || c == '+' || (c >= '0' && c <= '9')) {
      status = parseInt(out);
    } else if (std::isalpha(static_cast<unsigned char>(c))) {
      std::size_t end = position_;
      while (end < text_.size() && (std::isalnum(static_cast<unsigned char>(text_[end])) || text_[end] == '_')) ++end;
      std::string_view word = text_.substr(position_, end - position_);
      if (word == "True" || word == "False") {
        out.kind = Literal::Kind::Bool;
        out.flag = word == "True";
      } else if (word == "None") {
        out.kind = Literal::Kind::None;
      } else {
        return error(fmt::format("unexpected name '{}'", word));
      }
      position_ = end;
    } else {
      return error(fmt::format("unexpected character '{}'", printable(c)));
    }
    SVM_RETURN_IF_ERROR(status);
    out.source = text_.substr(start, position_ - start);
    return Status::ok();
  }

  static std::string printable(char c) {
    auto u = static_cast<unsigned char>(c);
    return u >= 0x20 && u < 0x7f ? std::string(1, c) : fmt::format("\\x{:02x}", u);
  }

  Status parseString(Literal& out) {
    const char quote = text_[position_++];
    out.kind = Literal::Kind::String;
    while (true) {
      if (atEnd()) return error("unterminated string");
      char c = text_[position_++];
      if (c == quote) break;
      if (c == '\n') return error("newline inside a string");
      if (c == '\\') {
        if (atEnd()) return error("unterminated string");
        c = text_[position_++];
      }
      out.text += c;
    }
    return Status::ok();
  }

  Status parseInt(Literal& out) {
    bool negative = false;
    if (peek() == '-' || peek() == '+') {
      negative = peek() == '-';
      ++position_;
    }
    if (atEnd() || peek() < '0' || peek() > '9') return error("expected digits");
    std::uint64_t magnitude = 0;
    while (!atEnd() && peek() >= '0' && peek() <= '9') {
      auto digit = static_cast<std::uint64_t>(peek() - '0');
      if (magnitude > (std::numeric_limits<std::uint64_t>::max() - digit) / 10) return error("integer too large");
      magnitude = magnitude * 10 + digit;
      ++position_;
    }
    if (!atEnd() && (peek() == 'L' || peek() == 'l')) ++position_;  // Python 2 long suffix
    const auto limit = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
    if (magnitude > limit + (negative ? 1 : 0)) return error("integer too large");
    out.kind = Literal::Kind::Int;
    out.number = negative ? static_cast<std::int64_t>(0 - magnitude) : static_cast<std::int64_t>(magnitude);
    return Status::ok();
  }

  // (a, b,)  [a, b]  {k: v, k: v,} — trailing commas allowed; (x) without a comma is just x.
  Status parseSequence(Literal& out, int depth) {
    const char open = text_[position_++];
    const char close = open == '(' ? ')' : open == '[' ? ']' : '}';
    const bool is_dict = open == '{';
    std::vector<Literal> items;
    bool saw_comma = false;
    while (true) {
      skipSpace();
      if (atEnd()) return error(fmt::format("missing '{}'", close));
      if (peek() == close) {
        ++position_;
        break;
      }
      Literal item;
      SVM_RETURN_IF_ERROR(parseValue(item, depth + 1));
      items.push_back(std::move(item));
      if (is_dict) {
        skipSpace();
        if (atEnd() || peek() != ':') return error("expected ':' after a dict key");
        ++position_;
        Literal value;
        SVM_RETURN_IF_ERROR(parseValue(value, depth + 1));
        items.push_back(std::move(value));
      }
      skipSpace();
      if (atEnd()) return error(fmt::format("missing '{}'", close));
      if (peek() == ',') {
        ++position_;
        saw_comma = true;
        continue;
      }
      if (peek() != close) return error(fmt::format("expected ',' or '{}'", close));
    }
    if (open == '(' && items.size() == 1 && !saw_comma) {  // parenthesized expression
      out = std::move(items.front());
      return Status::ok();
    }
    out.kind = is_dict ? Literal::Kind::Dict : open == '(' ? Literal::Kind::Tuple : Literal::Kind::List;
    out.items = std::move(items);
    return Status::ok();
  }

  std::string_view text_;
  std::size_t position_ = 0;
};

// ---- dtypes ----

struct NpyHeader {
  DType dtype = DType::Float32;
  bool swap_bytes = false;
  bool fortran_order = false;
  Shape shape;
  std::uint64_t data_bytes = 0;
};

constexpr std::string_view kSupportedDescrs = "<f2 <f4 <f8 <i4 <i8 |b1 (either byte order)";

Expected<NpyHeader> interpretDescr(const Literal& descr, std::string_view what) {
  if (descr.kind != Literal::Kind::String) {
    return makeError(ErrorCode::Unsupported, "{}: unsupported dtype descr {} (structured dtypes are not supported; ShapeVM reads {})",
                     what, descr.source, kSupportedDescrs);
  }
  std::string_view text = descr.text;
  char order = '=';
  if (!text.empty() && (text[0] == '<' || text[0] == '>' || text[0] == '|' || text[0] == '=')) {
    order = text[0];
    text.remove_prefix(1);
  }
  std::optional<DType> dtype;
  if (text == "f2" || text == "e") dtype = DType::Float16;
  else if (text == "f4" || text == "f") dtype = DType::Float32;
  else if (text == "f8" || text == "d") dtype = DType::Float64;
  else if (text == "i4") dtype = DType::Int32;
  else if (text == "i8") dtype = DType::Int64;
  else if (text == "b1" || text == "?") dtype = DType::Bool;
  if (!dtype) {
    return makeError(ErrorCode::Unsupported, "{}: unsupported dtype descr '{}' (ShapeVM reads {})", what, descr.text,
                     kSupportedDescrs);
  }
  NpyHeader header;
  header.dtype = *dtype;
  const bool file_little = order == '=' ? kHostLittleEndian : order != '>';
  header.swap_bytes = dtypeSize(*dtype) > 1 && file_little != kHostLittleEndian;
  return header;
}

Expected<NpyHeader> interpretHeader(std::string_view text, std::string_view what) {
  LiteralParser parser(text);
  Expected<Literal> parsed = parser.parseDocument();
  if (!parsed) return Status(parsed.status()).withContext(what);
  const Literal& dict = *parsed;
  if (dict.kind != Literal::Kind::Dict) {
    return makeError(ErrorCode::BadFormat, "{}: bad header: expected a dict, got {}", what, dict.source);
  }
  const Literal* descr = nullptr;
  const Literal* fortran = nullptr;
  const Literal* shape = nullptr;
  for (std::size_t i = 0; i + 1 < dict.items.size(); i += 2) {
    const Literal& key = dict.items[i];
    const Literal* value = &dict.items[i + 1];
    const Literal** slot = nullptr;
    if (key.kind == Literal::Kind::String) {
      if (key.text == "descr") slot = &descr;
      else if (key.text == "fortran_order") slot = &fortran;
      else if (key.text == "shape") slot = &shape;
    }
    if (slot == nullptr) return makeError(ErrorCode::BadFormat, "{}: bad header: unexpected key {}", what, key.source);
    if (*slot != nullptr) return makeError(ErrorCode::BadFormat, "{}: bad header: key {} appears twice", what, key.source);
    *slot = value;
  }
  if (!descr || !fortran || !shape) {
    return makeError(ErrorCode::BadFormat, "{}: bad header: missing key '{}'", what,
                     !descr ? "descr" : !fortran ? "fortran_order" : "shape");
  }
  SVM_ASSIGN_OR_RETURN(NpyHeader header, interpretDescr(*descr, what));
  if (fortran->kind != Literal::Kind::Bool) {
    return makeError(ErrorCode::BadFormat, "{}: bad header: fortran_order must be True or False, got {}", what,
                     fortran->source);
  }
  header.fortran_order = fortran->flag;
  if (shape->kind != Literal::Kind::Tuple) {
    return makeError(ErrorCode::BadFormat, "{}: bad header: shape must be a tuple, got {}", what, shape->source);
  }
  if (shape->items.size() > static_cast<std::size_t>(kMaxRank)) {
    return makeError(ErrorCode::Unsupported, "{}: shape {} has rank {}, more than the maximum rank {}", what,
                     shape->source, shape->items.size(), kMaxRank);
  }
  std::uint64_t bytes = dtypeSize(header.dtype);
  for (const Literal& extent : shape->items) {
    if (extent.kind != Literal::Kind::Int || extent.number < 0) {
      return makeError(ErrorCode::BadFormat, "{}: bad header: shape {} has an extent that is not a non-negative int", what,
                       shape->source);
    }
    header.shape.push_back(extent.number);
  }
  // Overflow only matters when no extent is zero.
  if (std::find(header.shape.begin(), header.shape.end(), 0) == header.shape.end()) {
    for (std::int64_t extent : header.shape) {
      if (__builtin_mul_overflow(bytes, static_cast<std::uint64_t>(extent), &bytes) ||
          bytes > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
        return makeError(ErrorCode::BadFormat, "{}: shape {} of {} is too large (size overflows)", what, shape->source,
                         descr->text);
      }
    }
  } else {
    bytes = 0;
  }
  header.data_bytes = bytes;
  return header;
}

void swapBytesInPlace(void* data, std::size_t item_size, std::size_t count) {
  auto* bytes = static_cast<std::uint8_t*>(data);
  for (std::size_t i = 0; i < count; ++i, bytes += item_size) std::reverse(bytes, bytes + item_size);
}

// ---- Reading ----

Expected<Tensor> loadNpy(ByteSource& source, std::string_view what) {
  const std::uint64_t total = source.remaining();
  if (total < kMagicSize + 4) {
    return makeError(ErrorCode::BadFormat, "{}: not a .npy file: {} bytes is shorter than the preamble", what, total);
  }
  std::uint8_t preamble[12] = {};
  SVM_RETURN_IF_ERROR(source.read(preamble, kMagicSize + 2).withContext(what));
  if (std::memcmp(preamble, kMagic, kMagicSize) != 0) {
    return makeError(ErrorCode::BadFormat, "{}: not a .npy file (bad magic; expected \\x93NUMPY)", what);
  }
  const int major = preamble[6], minor = preamble[7];
  if (major < 1 || major > 3) {
    return makeError(ErrorCode::Unsupported, "{}: .npy format version {}.{} is not supported (1.0, 2.0, 3.0 are)", what,
                     major, minor);
  }
  const std::size_t length_bytes = major == 1 ? 2 : 4;
  if (source.remaining() < length_bytes) {
    return makeError(ErrorCode::BadFormat, "{}: truncated .npy preamble", what);
  }
  SVM_RETURN_IF_ERROR(source.read(preamble + 8, length_bytes).withContext(what));
  std::uint64_t header_length = preamble[8] | (static_cast<std::uint64_t>(preamble[9]) << 8);
  if (major > 1) header_length |= (static_cast<std::uint64_t>(preamble[10]) << 16) | (static_cast<std::uint64_t>(preamble[11]) << 24);
  if (header_length > source.remaining()) {
    return makeError(ErrorCode::BadFormat, "{}: truncated .npy header ({} header bytes declared, {} present)", what,
                     header_length, source.remaining());
  }
  std::string header_text(static_cast<std::size_t>(header_length), '\0');
  SVM_RETURN_IF_ERROR(source.read(header_text.data(), header_text.size()).withContext(what));
  SVM_ASSIGN_OR_RETURN(NpyHeader header, interpretHeader(header_text, what));

  if (source.remaining() != header.data_bytes) {
    return makeError(ErrorCode::BadFormat, "{}: data size mismatch: shape {} of {} needs {} bytes, the file holds {}",
                     what, header.shape.toString(), dtypeName(header.dtype), header.data_bytes, source.remaining());
  }
  // Fortran order is C order of the reversed shape; read it that way, then transpose.
  const int rank = header.shape.rank();
  const bool transpose = header.fortran_order && rank > 1;
  Shape stored_shape = header.shape;
  if (transpose) std::reverse(stored_shape.data(), stored_shape.data() + rank);
  Expected<Tensor> allocated = Tensor::empty(header.dtype, stored_shape);
  if (!allocated) return Status(allocated.status()).withContext(what);
  Tensor tensor = std::move(allocated).value();
  SVM_RETURN_IF_ERROR(source.read(tensor.rawData(), static_cast<std::size_t>(header.data_bytes)).withContext(what));

  const auto count = static_cast<std::size_t>(tensor.numel());
  if (header.swap_bytes) swapBytesInPlace(tensor.rawData(), tensor.itemSize(), count);
  if (header.dtype == DType::Bool) {  // any nonzero byte is true; keep bool storage 0/1
    auto* bytes = static_cast<std::uint8_t*>(tensor.rawData());
    for (std::size_t i = 0; i < count; ++i) bytes[i] = bytes[i] != 0 ? 1 : 0;
  }
  if (!transpose) return tensor;
  Shape reversed_strides = tensor.strides();
  std::reverse(reversed_strides.data(), reversed_strides.data() + rank);
  SVM_ASSIGN_OR_RETURN(Tensor view, tensor.asStrided(header.shape, reversed_strides, 0));
  Expected<Tensor> copy = view.clone();
  if (!copy) return Status(copy.status()).withContext(what);
  return std::move(copy).value();
}

// ---- Writing ----

std::string headerFor(const Tensor& tensor) {
  std::string descr;
  switch (tensor.dtype()) {
    case DType::Float32:
    case DType::BFloat16: descr = "f4"; break;
    case DType::Float16: descr = "f2"; break;
    case DType::Float64: descr = "f8"; break;
    case DType::Int32: descr = "i4"; break;
    case DType::Int64: descr = "i8"; break;
    case DType::Bool: descr = "b1"; break;
  }
  descr.insert(0, 1, tensor.dtype() == DType::Bool ? '|' : '<');
  std::string shape = "(";
  for (int i = 0; i < tensor.rank(); ++i) shape += fmt::format("{}, ", tensor.dim(i));
  if (tensor.rank() == 1) shape.pop_back();  // "(3,)"
  else if (tensor.rank() > 1) shape.resize(shape.size() - 2);
  shape += ")";
  std::string dict = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}", descr, shape);
  // Pad with spaces so the data starts on a 64-byte boundary; the header ends with '\n'.
  const std::size_t preamble = dict.size() + 1 + 64 < 65536 ? 10 : 12;  // version 1.0 or 2.0
  const std::size_t unpadded = preamble + dict.size() + 1;
  dict.append((64 - unpadded % 64) % 64, ' ');
  dict += '\n';
  return dict;
}

std::size_t writtenItemSize(const Tensor& tensor) {
  return tensor.dtype() == DType::BFloat16 ? 4 : tensor.itemSize();
}

void appendHeader(std::vector<std::uint8_t>& out, const Tensor& tensor) {
  const std::string dict = headerFor(tensor);
  out.insert(out.end(), kMagic, kMagic + kMagicSize);
  const std::size_t length = dict.size();
  if (length < 65536) {
    out.insert(out.end(), {1, 0, static_cast<std::uint8_t>(length), static_cast<std::uint8_t>(length >> 8)});
  } else {
    out.insert(out.end(), {2, 0, static_cast<std::uint8_t>(length), static_cast<std::uint8_t>(length >> 8),
                           static_cast<std::uint8_t>(length >> 16), static_cast<std::uint8_t>(length >> 24)});
  }
  out.insert(out.end(), dict.begin(), dict.end());
}

// Copies the elements in C order, little-endian, bfloat16 widened to float32.
void appendData(std::vector<std::uint8_t>& out, const Tensor& tensor) {
  const std::size_t out_item = writtenItemSize(tensor);
  const auto count = static_cast<std::size_t>(tensor.numel());
  const std::size_t start = out.size();
  out.resize(start + count * out_item);
  if (count == 0) return;
  std::uint8_t* destination = out.data() + start;
  const bool widen = tensor.dtype() == DType::BFloat16;
  if (tensor.isContiguous() && !widen) {
    std::memcpy(destination, tensor.rawData(), count * out_item);
  } else {
    const std::size_t in_item = tensor.itemSize();
    const auto* base = static_cast<const std::uint8_t*>(tensor.storage()->data());
    const int rank = tensor.rank();
    std::int64_t index[kMaxRank] = {};
    for (std::size_t linear = 0; linear < count; ++linear) {
      std::int64_t position = tensor.offset();
      for (int axis = 0; axis < rank; ++axis) position += index[axis] * tensor.stride(axis);
      const std::uint8_t* source = base + position * static_cast<std::int64_t>(in_item);
      if (widen) {
        std::uint16_t bits;
        std::memcpy(&bits, source, 2);
        const float value = bf16ToFloat(bits);
        std::memcpy(destination + linear * out_item, &value, 4);
      } else {
        std::memcpy(destination + linear * out_item, source, in_item);
      }
      for (int axis = rank - 1; axis >= 0; --axis) {
        if (++index[axis] < tensor.dim(axis)) break;
        index[axis] = 0;
      }
    }
  }
  if (!kHostLittleEndian && out_item > 1) swapBytesInPlace(destination, out_item, count);
}

std::string zipErrorText(int code) {
  zip_error_t error;
  zip_error_init_with_code(&error, code);
  std::string text = zip_error_strerror(&error);
  zip_error_fini(&error);
  return text;
}

}  // namespace

// ---- Public API ----

Expected<Tensor> parseNpy(std::span<const std::uint8_t> bytes, std::string_view what) {
  SpanSource source(bytes);
  return loadNpy(source, what);
}

Expected<Tensor> readNpy(const std::string& path) {
  FilePtr file(std::fopen(path.c_str(), "rb"));
  if (!file) return makeError(ErrorCode::IoError, "{}: cannot open: {}", path, std::strerror(errno));
  if (std::fseek(file.get(), 0, SEEK_END) != 0) {
    return makeError(ErrorCode::IoError, "{}: cannot seek: {}", path, std::strerror(errno));
  }
  const long size = std::ftell(file.get());
  if (size < 0) return makeError(ErrorCode::IoError, "{}: cannot read (not a regular file?): {}", path, std::strerror(errno));
  std::rewind(file.get());
  FileSource source(file.get(), static_cast<std::uint64_t>(size));
  return loadNpy(source, path);
}

std::vector<std::uint8_t> serializeNpy(const Tensor& tensor) {
  std::vector<std::uint8_t> out;
  if (!tensor.defined()) return out;
  appendHeader(out, tensor);
  appendData(out, tensor);
  return out;
}

Status writeNpy(const std::string& path, const Tensor& tensor) {
  if (!tensor.defined()) return makeError(ErrorCode::InvalidArgument, "{}: cannot write an undefined tensor", path);
  FilePtr file(std::fopen(path.c_str(), "wb"));
  if (!file) return makeError(ErrorCode::IoError, "{}: cannot create: {}", path, std::strerror(errno));
  std::vector<std::uint8_t> bytes;
  appendHeader(bytes, tensor);
  const bool direct = tensor.isContiguous() && tensor.dtype() != DType::BFloat16 && kHostLittleEndian;
  if (!direct) appendData(bytes, tensor);
  bool ok = std::fwrite(bytes.data(), 1, bytes.size(), file.get()) == bytes.size();
  if (ok && direct) {
    const std::size_t data_bytes = static_cast<std::size_t>(tensor.numel()) * tensor.itemSize();
    ok = data_bytes == 0 || std::fwrite(tensor.rawData(), 1, data_bytes, file.get()) == data_bytes;
  }
  if (!ok) return makeError(ErrorCode::IoError, "{}: write failed: {}", path, std::strerror(errno));
  if (std::fclose(file.release()) != 0) {
    return makeError(ErrorCode::IoError, "{}: write failed on close: {}", path, std::strerror(errno));
  }
  return Status::ok();
}

Expected<std::vector<std::pair<std::string, Tensor>>> readNpz(const std::string& path) {
  // libzip reads an empty file as an empty archive; numpy (and we) call it what it is.
  std::error_code size_error;
  if (std::filesystem::is_regular_file(path, size_error) && std::filesystem::file_size(path, size_error) == 0) {
    return makeError(ErrorCode::BadFormat, "{}: cannot open as .npz: the file is empty", path);
  }
  int open_error = 0;
  zip_t* archive = zip_open(path.c_str(), ZIP_RDONLY | ZIP_CHECKCONS, &open_error);
  if (archive == nullptr) {
    const ErrorCode code = open_error == ZIP_ER_NOENT || open_error == ZIP_ER_OPEN || open_error == ZIP_ER_READ
                               ? ErrorCode::IoError
                               : ErrorCode::BadFormat;
    return makeError(code, "{}: cannot open as .npz: {}", path, zipErrorText(open_error));
  }
  auto closer = [](zip_t* z) { zip_discard(z); };
  std::unique_ptr<zip_t, decltype(closer)> owner(archive, closer);

  std::vector<std::pair<std::string, Tensor>> out;
  const zip_int64_t entries = zip_get_num_entries(archive, 0);
  for (zip_int64_t i = 0; i < entries; ++i) {
    zip_stat_t stat;
    zip_stat_init(&stat);
    if (zip_stat_index(archive, static_cast<zip_uint64_t>(i), 0, &stat) != 0) {
      return makeError(ErrorCode::BadFormat, "{}: cannot read entry {}: {}", path, i, zip_strerror(archive));
    }
    if (!(stat.valid & ZIP_STAT_NAME) || !(stat.valid & ZIP_STAT_SIZE)) {
      return makeError(ErrorCode::BadFormat, "{}: entry {} has no name or size", path, i);
    }
    std::string name = stat.name;
    if (!name.empty() && name.back() == '/') continue;  // a directory entry
    const std::string what = fmt::format("{}:{}", path, name);
    if (name.size() <= 4 || name.compare(name.size() - 4, 4, ".npy") != 0) {
      return makeError(ErrorCode::BadFormat, "{}: member is not a .npy array (name does not end in .npy)", what);
    }
    name.resize(name.size() - 4);
    zip_file_t* member = zip_fopen_index(archive, static_cast<zip_uint64_t>(i), 0);
    if (member == nullptr) return makeError(ErrorCode::BadFormat, "{}: cannot open member: {}", what, zip_strerror(archive));
    auto member_closer = [](zip_file_t* f) { zip_fclose(f); };
    std::unique_ptr<zip_file_t, decltype(member_closer)> member_owner(member, member_closer);
    ZipMemberSource source(member, stat.size);
    SVM_ASSIGN_OR_RETURN(Tensor tensor, loadNpy(source, what));
    SVM_RETURN_IF_ERROR(source.checkEnd().withContext(what));
    out.emplace_back(std::move(name), std::move(tensor));
  }
  return out;
}

Status writeNpz(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                NpzCompression compression) {
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const auto& [name, tensor] = tensors[i];
    if (name.empty()) return makeError(ErrorCode::InvalidArgument, "{}: array {} has an empty name", path, i);
    if (!tensor.defined()) return makeError(ErrorCode::InvalidArgument, "{}: array '{}' is undefined", path, name);
    for (std::size_t j = 0; j < i; ++j) {
      if (tensors[j].first == name) return makeError(ErrorCode::InvalidArgument, "{}: array name '{}' appears twice", path, name);
    }
  }
  if (tensors.empty()) {  // libzip writes no file for an empty archive; numpy writes just the end record
    FilePtr file(std::fopen(path.c_str(), "wb"));
    if (!file) return makeError(ErrorCode::IoError, "{}: cannot create: {}", path, std::strerror(errno));
    const std::uint8_t end_record[22] = {'P', 'K', 5, 6};
    if (std::fwrite(end_record, 1, sizeof end_record, file.get()) != sizeof end_record || std::fclose(file.release()) != 0) {
      return makeError(ErrorCode::IoError, "{}: write failed: {}", path, std::strerror(errno));
    }
    return Status::ok();
  }
  int open_error = 0;
  zip_t* archive = zip_open(path.c_str(), ZIP_CREATE | ZIP_TRUNCATE, &open_error);
  if (archive == nullptr) return makeError(ErrorCode::IoError, "{}: cannot create: {}", path, zipErrorText(open_error));
  // libzip reads the buffers at zip_close, so they live until then.
  std::vector<std::vector<std::uint8_t>> buffers;
  buffers.reserve(tensors.size());
  for (const auto& [name, tensor] : tensors) {
    buffers.push_back(serializeNpy(tensor));
    const auto& bytes = buffers.back();
    zip_source_t* source = zip_source_buffer(archive, bytes.data(), bytes.size(), 0);
    zip_int64_t index = source ? zip_file_add(archive, (name + ".npy").c_str(), source, ZIP_FL_ENC_UTF_8) : -1;
    if (index < 0) {
      if (source) zip_source_free(source);
      Status status = makeError(ErrorCode::IoError, "{}: cannot add '{}': {}", path, name, zip_strerror(archive));
      zip_discard(archive);
      return status;
    }
    const zip_int32_t method = compression == NpzCompression::Deflated ? ZIP_CM_DEFLATE : ZIP_CM_STORE;
    if (zip_set_file_compression(archive, static_cast<zip_uint64_t>(index), method, 0) != 0) {
      Status status = makeError(ErrorCode::IoError, "{}: cannot set compression for '{}': {}", path, name, zip_strerror(archive));
      zip_discard(archive);
      return status;
    }
  }
  if (zip_close(archive) != 0) {
    Status status = makeError(ErrorCode::IoError, "{}: cannot write: {}", path, zip_strerror(archive));
    zip_discard(archive);
    return status;
  }
  return Status::ok();
}

}  // namespace shapevm
