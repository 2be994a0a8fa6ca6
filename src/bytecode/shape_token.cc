// SPDX-License-Identifier: Apache-2.0
// Shape-token text form (parse/print) and the runtime check of a tensor against a token.
#include "bytecode/shape_token.h"

#include <charconv>

namespace shapevm {
namespace {

bool parseInt(std::string_view text, std::int64_t* out) {
  if (text.empty()) return false;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  return ec == std::errc() && end == text.data() + text.size();
}

std::string_view trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

Expected<DimToken> parseDim(std::string_view text, std::string_view whole) {
  auto fail = [&](std::string_view why) {
    return makeError(ErrorCode::ParseError, "bad dim '{}' in shape token '{}': {}", text, whole, why);
  };
  DimToken dim;
  std::int64_t value = 0;
  if (parseInt(text, &value)) {
    if (value < 0) return fail("extent must be >= 0");
    return DimToken::fixed(value);
  }
  dim.is_static = false;
  std::string_view rest = text;
  if (!rest.empty() && rest.front() == '?') {
    rest.remove_prefix(1);
    std::size_t digits = 0;
    while (digits < rest.size() && rest[digits] >= '0' && rest[digits] <= '9') ++digits;
    if (digits > 0) {
      std::int64_t id = 0;
      if (!parseInt(rest.substr(0, digits), &id) || id > 1000000) return fail("bad dynamic dim id");
      dim.id = static_cast<std::int32_t>(id);
      rest.remove_prefix(digits);
    }
    if (!rest.empty() && rest.front() == ':') {
      rest.remove_prefix(1);
      if (rest.find("..") == std::string_view::npos) return fail("expected a range lo..hi after ':'");
    }
  }
  auto percent = rest.find('%');
  std::string_view range = rest.substr(0, percent);
  if (percent != std::string_view::npos) {
    if (!parseInt(rest.substr(percent + 1), &dim.divisor) || dim.divisor < 1) return fail("divisor must be a positive int");
  }
  if (!range.empty()) {
    auto dots = range.find("..");
    if (dots == std::string_view::npos) return fail("expected ?N, ?N%D, lo..hi or ?N:lo..hi");
    if (!parseInt(range.substr(0, dots), &dim.lo) || dim.lo < 0) return fail("range lower bound must be an int >= 0");
    std::string_view hi = range.substr(dots + 2);
    if (!hi.empty() && (!parseInt(hi, &dim.hi) || dim.hi < dim.lo || dim.hi == DimRange::kUnbounded)) {
      return fail("range upper bound must be an int >= lo");
    }
  } else if (text.front() != '?') {
    return fail("expected an extent, ?N, or a range");
  }
  return dim;
}

}  // namespace

bool DimToken::accepts(std::int64_t extent) const {
  return is_static ? extent == size : DimRange::accepts(extent);
}

std::string DimToken::toString() const {
  if (is_static) return std::to_string(size);
  const std::string constraints = DimRange::toString();  // "lo..hi%d", "lo..", "%d" or ""
  const bool has_range = lo != 0 || bounded();
  if (id < 0) return has_range ? constraints : "?" + constraints;
  return "?" + std::to_string(id) + (has_range ? ":" : "") + constraints;
}

std::string TensorDescriptor::toString() const {
  if (!is_tensor) return "_";
  std::string text = dtype ? std::string(dtypeShortName(*dtype)) : "";
  if (any_rank) return text + "[*]";
  text += "[";
  for (std::size_t i = 0; i < dims.size(); ++i) {
    if (i) text += ",";
    text += dims[i].toString();
  }
  return text + "]";
}

Status TensorDescriptor::check(const Tensor& tensor, std::string_view what) const {
  if (!is_tensor) return makeError(ErrorCode::KindMismatch, "{}: expected a non-tensor value, got {}", what, tensor.describe());
  if (dtype && tensor.dtype() != *dtype) {
    return makeError(ErrorCode::DTypeMismatch, "{}: expected dtype {} (token {}), got {}", what, dtypeName(*dtype),
                     toString(), tensor.describe());
  }
  if (any_rank) return Status::ok();
  if (tensor.rank() != rank()) {
    return makeError(ErrorCode::ShapeMismatch, "{}: expected rank {} (token {}), got shape {}", what, rank(), toString(),
                     tensor.shape().toString());
  }
  for (int i = 0; i < rank(); ++i) {
    if (!dims[static_cast<std::size_t>(i)].accepts(tensor.dim(i))) {
      return makeError(ErrorCode::ShapeMismatch, "{}: dim {} is {} but the token {} requires {} (got shape {})", what, i,
                       tensor.dim(i), toString(), dims[static_cast<std::size_t>(i)].toString(), tensor.shape().toString());
    }
  }
  return Status::ok();
}

Expected<TensorDescriptor> parseTensorDescriptor(std::string_view text) {
  std::string_view whole = trim(text);
  if (whole == "_") return TensorDescriptor::notTensor();
  TensorDescriptor token;
  auto bracket = whole.find('[');
  if (bracket == std::string_view::npos || whole.back() != ']') {
    return makeError(ErrorCode::ParseError, "bad shape token '{}': expected [dims] with an optional dtype prefix", whole);
  }
  std::string_view prefix = whole.substr(0, bracket);
  if (!prefix.empty()) {
    auto dtype = parseDType(prefix);
    if (!dtype) return makeError(ErrorCode::ParseError, "bad shape token '{}': unknown dtype '{}'", whole, prefix);
    token.dtype = dtype;
  }
  std::string_view body = trim(whole.substr(bracket + 1, whole.size() - bracket - 2));
  if (body == "*") {
    token.any_rank = true;
    return token;
  }
  while (!body.empty()) {
    auto comma = body.find(',');
    std::string_view item = trim(body.substr(0, comma));
    if (item.empty()) return makeError(ErrorCode::ParseError, "bad shape token '{}': empty dim", whole);
    SVM_ASSIGN_OR_RETURN(DimToken dim, parseDim(item, whole));
    token.dims.push_back(dim);
    if (token.dims.size() > static_cast<std::size_t>(kMaxRank)) {
      return makeError(ErrorCode::ParseError, "bad shape token '{}': rank exceeds {}", whole, kMaxRank);
    }
    if (comma == std::string_view::npos) break;
    body = body.substr(comma + 1);
    if (trim(body).empty()) return makeError(ErrorCode::ParseError, "bad shape token '{}': trailing comma", whole);
  }
  return token;
}

}  // namespace shapevm
