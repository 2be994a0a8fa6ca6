// SPDX-License-Identifier: Apache-2.0
// .svm writer and bounds-checked reader. The reader keeps one sticky error (the first failure,
// with its offset and field); every count is checked against the bytes left before anything is
// allocated, and every enum byte (opcode, op id, dtype, kinds) is range-checked.
#include "bytecode/binary_format.h"

#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <string>

namespace shapevm {
namespace {

static_assert(std::endian::native == std::endian::little, "the .svm reader/writer assumes a little-endian host");

constexpr std::uint8_t kMagic[4] = {'S', 'V', 'M', 0x01};
constexpr std::uint32_t tag(const char (&name)[5]) {
  return static_cast<std::uint32_t>(name[0]) | static_cast<std::uint32_t>(name[1]) << 8 |
         static_cast<std::uint32_t>(name[2]) << 16 | static_cast<std::uint32_t>(name[3]) << 24;
}
constexpr std::uint32_t kMeta = tag("META"), kConstants = tag("CNST"), kFunctions = tag("FUNC"), kLines = tag("LINE");
// Encoded sizes used to bound counts before allocating.
constexpr std::size_t kDimTokenSize = 1 + 8 + 4 + 8 + 8 + 8;  // is_static, size, id, lo, hi, divisor
constexpr std::size_t kMinTokenSize = 3;
constexpr std::size_t kInstructionSize = 16;
// Version 1's JitEnter opcode number (see kSvmVersion).
constexpr std::uint8_t kV1JitEnter = 13;

std::uint32_t crc(std::span<const std::uint8_t> bytes) {
  uLong value = crc32(0L, Z_NULL, 0);
  const std::uint8_t* data = bytes.data();
  std::size_t left = bytes.size();
  while (left > 0) {
    auto chunk = static_cast<uInt>(std::min<std::size_t>(left, 1u << 30));
    value = crc32(value, data, chunk);
    data += chunk;
    left -= chunk;
  }
  return static_cast<std::uint32_t>(value);
}

// ---------------------------------------------------------------- writer

class Writer {
 public:
  std::vector<std::uint8_t> bytes;

  template <typename T>
  void put(T value) {
    std::uint8_t raw[sizeof(T)];
    std::memcpy(raw, &value, sizeof(T));
    bytes.insert(bytes.end(), raw, raw + sizeof(T));
  }
  void u8(std::uint8_t v) { put(v); }
  void u32(std::uint32_t v) { put(v); }
  void i32(std::int32_t v) { put(v); }
  void i64(std::int64_t v) { put(v); }
  void count(std::size_t n) { put(static_cast<std::uint32_t>(n)); }
  void string(std::string_view s) {
    count(s.size());
    bytes.insert(bytes.end(), s.begin(), s.end());
  }
  void registers(const std::vector<std::int32_t>& list) {
    count(list.size());
    for (std::int32_t r : list) i32(r);
  }
  void token(const TensorDescriptor& t) {
    u8(static_cast<std::uint8_t>((t.is_tensor ? 1 : 0) | (t.dtype ? 2 : 0) | (t.any_rank ? 4 : 0)));
    u8(t.dtype ? static_cast<std::uint8_t>(*t.dtype) : 0);
    u8(static_cast<std::uint8_t>(t.dims.size()));
    for (const DimToken& d : t.dims) {
      u8(d.is_static ? 1 : 0);
      i64(d.size);
      i32(d.id);
      // On disk, -1 is "no bound" (the format predates DimRange's 0 / kUnbounded defaults).
      i64(d.lo != 0 || d.bounded() ? d.lo : -1);
      i64(d.bounded() ? d.hi : -1);
      i64(d.divisor);
    }
  }
  std::size_t beginSection(std::uint32_t section) {
    u32(section);
    put<std::uint64_t>(0);
    return bytes.size();
  }
  void endSection(std::size_t start) {
    std::uint64_t length = bytes.size() - start;
    std::memcpy(bytes.data() + start - 8, &length, 8);
  }
};

void writeConstant(Writer& w, const Constant& c) {
  w.u8(static_cast<std::uint8_t>(c.kind));
  switch (c.kind) {
    case ConstKind::None: break;
    case ConstKind::Int: w.i64(c.value.isInt() ? c.value.asInt() : 0); break;
    case ConstKind::Float: w.put<double>(c.value.isFloat() ? c.value.asFloat() : 0.0); break;
    case ConstKind::Bool: w.u8(c.value.isBool() && c.value.asBool() ? 1 : 0); break;
    case ConstKind::String: w.string(c.text); break;
    case ConstKind::Ints: {
      auto items = c.value.isTuple() ? c.value.tuple() : std::span<const Value>();
      w.count(items.size());
      for (const Value& v : items) w.i64(v.isInt() ? v.asInt() : 0);
      break;
    }
    case ConstKind::Tensor: {
      Tensor t;
      if (c.value.isTensor()) {
        auto contiguous = c.value.tensor().contiguous();
        if (contiguous) t = std::move(*contiguous);
      }
      if (!t.defined()) {  // unwritable: an empty f32[0] keeps the file well-formed
        w.u8(static_cast<std::uint8_t>(DType::Float32));
        w.u8(1);
        w.i64(0);
        w.put<std::uint64_t>(0);
        break;
      }
      w.u8(static_cast<std::uint8_t>(t.dtype()));
      w.u8(static_cast<std::uint8_t>(t.rank()));
      for (int i = 0; i < t.rank(); ++i) w.i64(t.dim(i));
      std::uint64_t nbytes = static_cast<std::uint64_t>(t.numel()) * t.itemSize();
      w.put(nbytes);
      const auto* data = static_cast<const std::uint8_t*>(t.rawData());
      w.bytes.insert(w.bytes.end(), data, data + nbytes);
      break;
    }
  }
}

void writeFunction(Writer& w, const Function& fn) {
  w.string(fn.name);
  w.i32(fn.num_outputs);
  w.i32(fn.num_registers);
  w.i32(fn.num_loops);
  w.count(fn.params.size());
  for (const Param& p : fn.params) {
    w.string(p.name);
    w.u8(static_cast<std::uint8_t>(p.kind));
    w.token(p.token);
  }
  w.count(fn.dim_names.size());
  for (const std::string& name : fn.dim_names) w.string(name);
  w.count(fn.code.size());
  for (const Instruction& inst : fn.code) {
    w.u8(static_cast<std::uint8_t>(inst.op));
    for (std::uint8_t r : inst.reserved) w.u8(r);
    w.i32(inst.a);
    w.i32(inst.b);
    w.i32(inst.c);
  }
  w.count(fn.op_sites.size());
  for (const OpSite& site : fn.op_sites) {
    w.put(static_cast<std::uint16_t>(site.op));
    w.registers(site.inputs);
    w.registers(site.outputs);
    w.count(site.attrs.size());
    for (const AttrValue& a : site.attrs) {
      w.u8(static_cast<std::uint8_t>(a.kind));
      switch (a.kind) {
        case AttrKind::Int:
        case AttrKind::Bool: w.i64(a.i); break;
        case AttrKind::Float: w.put(a.f); break;
        case AttrKind::DType: w.u8(static_cast<std::uint8_t>(a.dtype)); break;
        case AttrKind::Ints:
          w.count(a.ints.size());
          for (std::int64_t v : a.ints) w.i64(v);
          break;
      }
    }
    w.put(site.attrs_given);
    w.count(site.input_tokens.size());
    for (const TensorDescriptor& t : site.input_tokens) w.token(t);
    w.count(site.output_tokens.size());
    for (const TensorDescriptor& t : site.output_tokens) w.token(t);
  }
  w.count(fn.call_sites.size());
  for (const CallSite& site : fn.call_sites) {
    w.i32(site.callee);
    w.registers(site.args);
    w.registers(site.results);
  }
  w.registers(fn.operand_pool);
}

void writeLines(Writer& w, const Function& fn) {
  std::vector<std::size_t> starts;
  for (std::size_t pc = 0; pc < fn.code.size(); ++pc) {
    SourceLoc here = pc < fn.locs.size() ? fn.locs[pc] : SourceLoc{};
    SourceLoc before = pc > 0 && pc - 1 < fn.locs.size() ? fn.locs[pc - 1] : SourceLoc{};
    if (pc == 0 || !(here == before)) starts.push_back(pc);
  }
  w.count(starts.size());
  for (std::size_t pc : starts) {
    SourceLoc loc = pc < fn.locs.size() ? fn.locs[pc] : SourceLoc{};
    w.u32(static_cast<std::uint32_t>(pc));
    w.i32(loc.line);
    w.i32(loc.col);
  }
}

// ---------------------------------------------------------------- reader

class Reader {
 public:
  Reader(std::span<const std::uint8_t> bytes, std::string_view what, std::size_t base)
      : bytes_(bytes), what_(what), base_(base) {}

  bool ok() const { return error_.isOk(); }
  Status takeError() { return std::move(error_); }
  std::size_t left() const { return bytes_.size() - pos_; }
  std::size_t offset() const { return base_ + pos_; }

  void fail(std::string_view field, const std::string& why) { failAt(offset(), field, why); }
  // For a field already read: `at` is where it starts.
  void failAt(std::size_t at, std::string_view field, const std::string& why) {
    if (error_.isOk()) error_ = makeError(ErrorCode::BadFormat, "{}: offset {}: {}: {}", what_, at, field, why);
  }

  template <typename T>
  T get(std::string_view field) {
    T value{};
    if (!ok()) return value;
    if (left() < sizeof(T)) {
      fail(field, fmt::format("truncated (needs {} bytes, {} left)", sizeof(T), left()));
      return value;
    }
    std::memcpy(&value, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return value;
  }
  std::uint8_t u8(std::string_view field) { return get<std::uint8_t>(field); }
  std::int32_t i32(std::string_view field) { return get<std::int32_t>(field); }
  std::int64_t i64(std::string_view field) { return get<std::int64_t>(field); }

  // A u32 count of items of at least `item_size` bytes each, checked against the bytes left.
  std::size_t count(std::string_view field, std::size_t item_size) {
    std::size_t n = get<std::uint32_t>(field);
    if (ok() && item_size > 0 && n > left() / item_size) {
      fail(field, fmt::format("count {} needs at least {} bytes, {} left", n, n * item_size, left()));
    }
    return ok() ? n : 0;
  }
  std::string string(std::string_view field) {
    std::size_t n = count(field, 1);
    if (!ok()) return {};
    std::string out(reinterpret_cast<const char*>(bytes_.data() + pos_), n);
    pos_ += n;
    return out;
  }
  std::vector<std::int32_t> registers(std::string_view field) {
    std::size_t n = count(field, 4);
    std::vector<std::int32_t> out;
    out.reserve(n);
    for (std::size_t i = 0; i < n && ok(); ++i) out.push_back(i32(field));
    return out;
  }
  std::span<const std::uint8_t> raw(std::string_view field, std::uint64_t n) {
    if (!ok()) return {};
    if (n > left()) {
      fail(field, fmt::format("truncated (needs {} bytes, {} left)", n, left()));
      return {};
    }
    auto out = bytes_.subspan(pos_, static_cast<std::size_t>(n));
    pos_ += static_cast<std::size_t>(n);
    return out;
  }

  TensorDescriptor token(std::string_view field) {
    TensorDescriptor t;
    std::size_t at = offset();
    std::uint8_t flags = u8(field);
    std::uint8_t dtype = u8(field);
    std::uint8_t rank = u8(field);
    if (!ok()) return t;
    if (flags > 7 || dtype >= kNumDTypes || rank > kMaxRank || (!(flags & 2) && dtype != 0) || (!(flags & 1) && flags != 0) ||
        ((flags & 4) && rank != 0) || (!(flags & 1) && rank != 0)) {
      fail(field, fmt::format("bad shape token header (flags {}, dtype {}, rank {}) at {}", flags, dtype, rank, at));
      return t;
    }
    t.is_tensor = flags & 1;
    if (flags & 2) t.dtype = static_cast<DType>(dtype);
    t.any_rank = flags & 4;
    if (rank > left() / kDimTokenSize) {
      fail(field, "truncated shape token");
      return t;
    }
    for (int i = 0; i < rank && ok(); ++i) {
      DimToken d;
      std::uint8_t is_static = u8(field);
      d.is_static = is_static == 1;
      d.size = i64(field);
      d.id = i32(field);
      const std::int64_t lo = i64(field);
      const std::int64_t hi = i64(field);
      d.divisor = i64(field);
      bool valid = is_static <= 1 &&
                   (d.is_static ? (d.size >= 0 && d.id == -1 && lo == -1 && hi == -1 && d.divisor == 1)
                                : (d.size == 0 && d.id >= -1 && d.id <= 1000000 && lo >= -1 && hi >= -1 &&
                                   d.divisor >= 1 && (hi < 0 || (lo >= 0 && hi >= lo && hi != DimRange::kUnbounded))));
      if (!valid && ok()) fail(field, fmt::format("bad dim {} in shape token", i));
      d.lo = lo < 0 ? 0 : lo;
      d.hi = hi < 0 ? DimRange::kUnbounded : hi;
      t.dims.push_back(d);
    }
    return t;
  }

  void expectEnd(std::string_view field) {
    if (ok() && left() != 0) fail(field, fmt::format("{} unexpected trailing bytes", left()));
  }

 private:
  std::span<const std::uint8_t> bytes_;
  std::string_view what_;
  std::size_t base_;
  std::size_t pos_ = 0;
  Status error_;
};

Constant readConstant(Reader& r, std::size_t index) {
  const std::string field = fmt::format("constant k{}", index);
  Constant c;
  std::uint8_t kind = r.u8(field);
  if (!r.ok()) return c;
  if (kind > static_cast<std::uint8_t>(ConstKind::Ints)) {
    r.fail(field, fmt::format("unknown constant kind {}", kind));
    return c;
  }
  c.kind = static_cast<ConstKind>(kind);
  switch (c.kind) {
    case ConstKind::None: break;
    case ConstKind::Int: c.value = Value::fromInt(r.i64(field)); break;
    case ConstKind::Float: c.value = Value::fromFloat(r.get<double>(field)); break;
    case ConstKind::Bool: {
      std::uint8_t b = r.u8(field);
      if (b > 1) r.fail(field, fmt::format("bool byte {} is not 0 or 1", b));
      c.value = Value::fromBool(b == 1);
      break;
    }
    case ConstKind::String: c.text = r.string(field); break;
    case ConstKind::Ints: {
      std::size_t n = r.count(field, 8);
      std::vector<std::int64_t> items;
      items.reserve(n);
      for (std::size_t i = 0; i < n && r.ok(); ++i) items.push_back(r.i64(field));
      c.value = Value::fromInts(items);
      break;
    }
    case ConstKind::Tensor: {
      std::uint8_t dtype = r.u8(field);
      std::uint8_t rank = r.u8(field);
      if (!r.ok()) break;
      if (dtype >= kNumDTypes || rank > kMaxRank) {
        r.fail(field, fmt::format("bad tensor dtype {} or rank {}", dtype, rank));
        break;
      }
      Shape shape;
      std::uint64_t numel = 1;
      std::int64_t extent_product = 1;  // product of max(dim, 1): strides must fit in int64
      bool overflow = false;
      for (int i = 0; i < rank && r.ok(); ++i) {
        std::int64_t d = r.i64(field);
        if (d < 0) r.fail(field, fmt::format("negative tensor dim {}", d));
        shape.push_back(d);
        overflow = overflow || __builtin_mul_overflow(numel, static_cast<std::uint64_t>(d < 0 ? 0 : d), &numel) ||
                   __builtin_mul_overflow(extent_product, std::max<std::int64_t>(d, 1), &extent_product);
      }
      std::uint64_t nbytes = r.get<std::uint64_t>(field);
      if (!r.ok()) break;
      std::uint64_t expected = 0;
      if (overflow || __builtin_mul_overflow(numel, dtypeSize(static_cast<DType>(dtype)), &expected) || expected != nbytes) {
        r.fail(field, fmt::format("tensor data size {} does not match its shape {}", nbytes, shape.toString()));
        break;
      }
      auto data = r.raw(field, nbytes);
      if (!r.ok()) break;
      auto tensor = Tensor::empty(static_cast<DType>(dtype), shape);
      if (!tensor) {
        r.fail(field, tensor.status().message());
        break;
      }
      if (nbytes > 0) std::memcpy(tensor->rawData(), data.data(), nbytes);
      if (static_cast<DType>(dtype) == DType::Bool) {
        for (std::uint64_t i = 0; i < nbytes; ++i) {
          if (data[i] > 1) {
            r.fail(field, "bool tensor element is not 0 or 1");
            break;
          }
        }
      }
      c.value = Value::fromTensor(std::move(*tensor));
      break;
    }
  }
  return c;
}

AttrValue readAttr(Reader& r, std::string_view field) {
  AttrValue a;
  std::uint8_t kind = r.u8(field);
  if (!r.ok()) return a;
  if (kind > static_cast<std::uint8_t>(AttrKind::DType)) {
    r.fail(field, fmt::format("unknown attribute kind {}", kind));
    return a;
  }
  a.kind = static_cast<AttrKind>(kind);
  switch (a.kind) {
    case AttrKind::Int: a.i = r.i64(field); break;
    case AttrKind::Bool:
      a.i = r.i64(field);
      if (a.i != 0 && a.i != 1) r.fail(field, "bool attribute is not 0 or 1");
      break;
    case AttrKind::Float: a.f = r.get<double>(field); break;
    case AttrKind::DType: {
      std::uint8_t d = r.u8(field);
      if (d >= kNumDTypes) r.fail(field, fmt::format("unknown dtype {}", d));
      a.dtype = static_cast<DType>(d < kNumDTypes ? d : 0);
      break;
    }
    case AttrKind::Ints: {
      std::size_t n = r.count(field, 8);
      for (std::size_t i = 0; i < n && r.ok(); ++i) a.ints.push_back(r.i64(field));
      break;
    }
  }
  return a;
}

std::vector<TensorDescriptor> readTokens(Reader& r, std::string_view field) {
  std::size_t n = r.count(field, kMinTokenSize);
  std::vector<TensorDescriptor> out;
  out.reserve(n);
  for (std::size_t i = 0; i < n && r.ok(); ++i) out.push_back(r.token(field));
  return out;
}

Function readFunction(Reader& r, std::size_t index, std::uint32_t version) {
  Function fn;
  fn.name = r.string(fmt::format("function {} name", index));
  const std::string ctx = fmt::format("function '{}'", fn.name);
  fn.num_outputs = r.i32(ctx + " num_outputs");
  fn.num_registers = r.i32(ctx + " num_registers");
  fn.num_loops = r.i32(ctx + " num_loops");
  if (version == 1) {
    const std::int32_t regions = r.i32(ctx + " num_regions");
    if (r.ok() && regions != 0) r.fail(ctx + " num_regions", "JIT region tables were removed in version 2");
  }
  std::size_t params = r.count(ctx + " param count", 4 + 1 + kMinTokenSize);
  for (std::size_t i = 0; i < params && r.ok(); ++i) {
    Param p;
    const std::string field = fmt::format("{} param {}", ctx, i);
    p.name = r.string(field);
    std::uint8_t kind = r.u8(field);
    if (r.ok() && kind > static_cast<std::uint8_t>(ValueKind::Tuple)) r.fail(field, fmt::format("unknown value kind {}", kind));
    p.kind = static_cast<ValueKind>(kind <= static_cast<std::uint8_t>(ValueKind::Tuple) ? kind : 0);
    p.token = r.token(field);
    fn.params.push_back(std::move(p));
  }
  std::size_t dims = r.count(ctx + " dim name count", 4);
  for (std::size_t i = 0; i < dims && r.ok(); ++i) fn.dim_names.push_back(r.string(ctx + " dim name"));
  std::size_t code = r.count(ctx + " code size", kInstructionSize);
  fn.code.reserve(code);
  for (std::size_t pc = 0; pc < code && r.ok(); ++pc) {
    const std::string field = fmt::format("{} PC 0x{:04X}", ctx, pc);
    Instruction inst;
    std::uint8_t op = r.u8(field);
    if (version == 1 && r.ok()) {
      if (op == kV1JitEnter) r.fail(field, "JitEnter was removed in version 2");
      if (op > kV1JitEnter) --op;
    }
    if (r.ok() && op >= kNumOpcodes) r.fail(field, fmt::format("unknown opcode {}", op));
    inst.op = static_cast<Opcode>(op);
    for (std::uint8_t& b : inst.reserved) b = r.u8(field);
    inst.a = r.i32(field);
    inst.b = r.i32(field);
    inst.c = r.i32(field);
    fn.code.push_back(inst);
  }
  std::size_t sites = r.count(ctx + " op site count", 2 + 4 * 5 + 8);
  for (std::size_t i = 0; i < sites && r.ok(); ++i) {
    const std::string field = fmt::format("{} op site s{}", ctx, i);
    OpSite site;
    std::uint16_t op = r.get<std::uint16_t>(field);
    if (r.ok() && op >= kNumOps) r.fail(field, fmt::format("unknown op id {}", op));
    site.op = static_cast<OpId>(op < kNumOps ? op : 0);
    site.inputs = r.registers(field + " inputs");
    site.outputs = r.registers(field + " outputs");
    std::size_t attrs = r.count(field + " attribute count", 2);
    for (std::size_t k = 0; k < attrs && r.ok(); ++k) site.attrs.push_back(readAttr(r, field + " attribute"));
    site.attrs_given = r.get<std::uint64_t>(field + " attrs_given");
    site.input_tokens = readTokens(r, field + " input tokens");
    site.output_tokens = readTokens(r, field + " output tokens");
    fn.op_sites.push_back(std::move(site));
  }
  std::size_t calls = r.count(ctx + " call site count", 12);
  for (std::size_t i = 0; i < calls && r.ok(); ++i) {
    const std::string field = fmt::format("{} call site c{}", ctx, i);
    CallSite site;
    site.callee = r.i32(field + " callee");
    site.args = r.registers(field + " args");
    site.results = r.registers(field + " results");
    fn.call_sites.push_back(std::move(site));
  }
  fn.operand_pool = r.registers(ctx + " operand pool");
  return fn;
}

void readLines(Reader& r, Function& fn) {
  const std::string field = fmt::format("line table of '{}'", fn.name);
  std::size_t runs = r.count(field, 12);
  if (!r.ok()) return;
  if ((runs == 0) != fn.code.empty() || runs > fn.code.size()) {
    r.fail(field, fmt::format("{} runs for {} instructions", runs, fn.code.size()));
    return;
  }
  fn.locs.assign(fn.code.size(), SourceLoc{});
  std::size_t previous = 0;
  SourceLoc loc;
  for (std::size_t i = 0; i < runs && r.ok(); ++i) {
    std::uint32_t start = r.get<std::uint32_t>(field);
    SourceLoc next{r.i32(field), r.i32(field)};
    if (!r.ok()) return;
    if ((i == 0 && start != 0) || (i > 0 && start <= previous) || start >= fn.code.size()) {
      r.fail(field, fmt::format("run start PC {} out of order or out of range", start));
      return;
    }
    for (std::size_t pc = previous; pc < start; ++pc) fn.locs[pc] = loc;
    previous = start;
    loc = next;
  }
  for (std::size_t pc = previous; pc < fn.code.size(); ++pc) fn.locs[pc] = loc;
}

}  // namespace

std::vector<std::uint8_t> serializeModule(const Module& module) {
  Writer payload;
  std::size_t section = payload.beginSection(kMeta);
  payload.string(module.name);
  payload.string(module.source_file);
  payload.endSection(section);
  section = payload.beginSection(kConstants);
  payload.count(module.constants.size());
  for (const Constant& c : module.constants) writeConstant(payload, c);
  payload.endSection(section);
  {
    std::lock_guard<std::mutex> lock(module.tokenMutex());
    section = payload.beginSection(kFunctions);
    payload.count(module.functions.size());
    for (const Function& fn : module.functions) writeFunction(payload, fn);
    payload.endSection(section);
  }
  section = payload.beginSection(kLines);
  payload.count(module.functions.size());
  for (const Function& fn : module.functions) writeLines(payload, fn);
  payload.endSection(section);

  Writer out;
  out.bytes.insert(out.bytes.end(), kMagic, kMagic + 4);
  out.u32(kSvmVersion);
  out.u32(crc(payload.bytes));
  out.put<std::uint64_t>(payload.bytes.size());
  out.bytes.insert(out.bytes.end(), payload.bytes.begin(), payload.bytes.end());
  return out.bytes;
}

Expected<Module> deserializeModule(std::span<const std::uint8_t> bytes, std::string_view what) {
  Reader header(bytes, what, 0);
  auto magic = header.raw("magic", 4);
  if (header.ok() && std::memcmp(magic.data(), kMagic, 4) != 0) header.failAt(0, "magic", "not a ShapeVM module (expected \"SVM\\x01\")");
  std::uint32_t version = header.get<std::uint32_t>("version");
  if (header.ok() && (version < kSvmOldestVersion || version > kSvmVersion)) {
    header.failAt(
        4, "version",
        fmt::format("unsupported version {} (this build reads {}..{})", version, kSvmOldestVersion, kSvmVersion));
  }
  std::uint32_t checksum = header.get<std::uint32_t>("checksum");
  std::uint64_t size = header.get<std::uint64_t>("payload size");
  if (header.ok() && size != header.left()) {
    header.failAt(12, "payload size", fmt::format("header says {} payload bytes, the file has {}", size, header.left()));
  }
  if (!header.ok()) return header.takeError();
  auto payload = bytes.subspan(kSvmHeaderSize);
  if (crc(payload) != checksum) {
    return makeError(ErrorCode::BadFormat, "{}: offset {}: checksum: CRC32 mismatch (file says {:08x}, payload has {:08x})", what,
                     kSvmHeaderSize, checksum, crc(payload));
  }

  Module module;
  Reader sections(payload, what, kSvmHeaderSize);
  const std::uint32_t kOrder[] = {kMeta, kConstants, kFunctions, kLines};
  static constexpr std::string_view kNames[] = {"META", "CNST", "FUNC", "LINE"};
  for (int s = 0; s < 4; ++s) {
    const std::size_t tag_at = sections.offset();
    std::uint32_t id = sections.get<std::uint32_t>("section tag");
    if (sections.ok() && id != kOrder[s]) sections.failAt(tag_at, "section tag", fmt::format("expected section {}", kNames[s]));
    std::uint64_t length = sections.get<std::uint64_t>(fmt::format("section {} length", kNames[s]));
    std::size_t base = sections.offset();
    auto body = sections.raw(fmt::format("section {}", kNames[s]), length);
    if (!sections.ok()) return sections.takeError();
    Reader r(body, what, base);
    if (s == 0) {
      module.name = r.string("module name");
      module.source_file = r.string("source file");
    } else if (s == 1) {
      std::size_t n = r.count("constant count", 1);
      for (std::size_t i = 0; i < n && r.ok(); ++i) module.constants.push_back(readConstant(r, i));
    } else if (s == 2) {
      std::size_t n = r.count("function count", 4 * 10);
      for (std::size_t i = 0; i < n && r.ok(); ++i) module.functions.push_back(readFunction(r, i, version));
    } else {
      std::size_t n = r.count("line table count", 4);
      if (r.ok() && n != module.functions.size()) r.fail("line table count", fmt::format("{} tables for {} functions", n, module.functions.size()));
      for (std::size_t i = 0; i < n && r.ok(); ++i) readLines(r, module.functions[i]);
    }
    r.expectEnd(fmt::format("section {}", kNames[s]));
    if (!r.ok()) return r.takeError();
  }
  sections.expectEnd("payload");
  if (!sections.ok()) return sections.takeError();
  return module;
}

}  // namespace shapevm
