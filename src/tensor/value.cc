// SPDX-License-Identifier: Apache-2.0
// Value refcounting, conversions and descriptions.
#include "shapevm/value.h"

#include <new>

namespace shapevm {

std::string_view valueKindName(ValueKind kind) {
  switch (kind) {
    case ValueKind::None: return "none";
    case ValueKind::Int: return "int";
    case ValueKind::Float: return "float";
    case ValueKind::Bool: return "bool";
    case ValueKind::Tensor: return "tensor";
    case ValueKind::Tuple: return "tuple";
  }
  return "?";
}

Value Value::fromTensor(Tensor t) {
  Value out;
  out.kind_ = ValueKind::Tensor;
  out.t_ = nullptr;
  new (&out.t_) Tensor(std::move(t));
  return out;
}

Value Value::fromTuple(std::vector<Value> items) {
  Value out;
  out.kind_ = ValueKind::Tuple;
  out.tup_ = new TupleImpl();
  out.tup_->items = std::move(items);
  return out;
}

Value Value::fromInts(std::span<const std::int64_t> items) {
  std::vector<Value> values;
  values.reserve(items.size());
  for (std::int64_t v : items) values.push_back(fromInt(v));
  return fromTuple(std::move(values));
}

Value& Value::operator=(const Value& other) {
  if (this != &other) {
    Value copy(other);
    *this = std::move(copy);
  }
  return *this;
}

Value& Value::operator=(Value&& other) noexcept {
  if (this != &other) {
    release();
    kind_ = other.kind_;
    i_ = other.i_;
    other.kind_ = ValueKind::None;
  }
  return *this;
}

void Value::retain() {
  if (kind_ == ValueKind::Tensor) {
    if (t_) t_->refs.fetch_add(1, std::memory_order_relaxed);
  } else if (kind_ == ValueKind::Tuple) {
    tup_->refs.fetch_add(1, std::memory_order_relaxed);
  }
}

void Value::release() {
  if (kind_ == ValueKind::Tensor) {
    reinterpret_cast<Tensor*>(&t_)->~Tensor();
  } else if (kind_ == ValueKind::Tuple) {
    if (tup_->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete tup_;
  }
  kind_ = ValueKind::None;
}

namespace {
// Element `linear` of an integer or bool tensor, read exactly (no trip through double).
std::int64_t intElement(const Tensor& t, std::int64_t linear) {
  std::int64_t position = t.offset();
  for (int i = t.rank() - 1; i >= 0; --i) {
    position += (linear % t.dim(i)) * t.stride(i);
    linear /= t.dim(i);
  }
  const void* base = t.storage()->data();
  switch (t.dtype()) {
    case DType::Int64: return static_cast<const std::int64_t*>(base)[position];
    case DType::Int32: return static_cast<const std::int32_t*>(base)[position];
    case DType::Bool: return static_cast<const bool*>(base)[position] ? 1 : 0;
    default: return static_cast<std::int64_t>(loadAsDouble(base, t.dtype(), position));
  }
}
bool isIntTensor(const Value& v) { return v.isTensor() && v.tensor().defined() && !isFloating(v.tensor().dtype()); }
}  // namespace

Expected<std::int64_t> Value::toInt(std::string_view what) const {
  if (kind_ == ValueKind::Int) return i_;
  if (kind_ == ValueKind::Bool) return static_cast<std::int64_t>(b_);
  if (isIntTensor(*this) && tensor().numel() == 1) return intElement(tensor(), 0);
  return makeError(ErrorCode::KindMismatch, "{} must be an int, got {}", what, describe());
}

Expected<std::vector<std::int64_t>> Value::toInts(std::string_view what) const {
  std::vector<std::int64_t> out;
  if (kind_ == ValueKind::Tuple) {
    for (const Value& item : tuple()) {
      SVM_ASSIGN_OR_RETURN(std::int64_t v, item.toInt(what));
      out.push_back(v);
    }
    return out;
  }
  if (isIntTensor(*this) && tensor().rank() <= 1) {
    for (std::int64_t i = 0; i < tensor().numel(); ++i) out.push_back(intElement(tensor(), i));
    return out;
  }
  SVM_ASSIGN_OR_RETURN(std::int64_t v, toInt(what));
  out.push_back(v);
  return out;
}

std::string Value::describe() const {
  switch (kind_) {
    case ValueKind::None: return "None";
    case ValueKind::Int: return "int " + std::to_string(i_);
    case ValueKind::Float: return fmt::format("float {}", f_);
    case ValueKind::Bool: return b_ ? "bool True" : "bool False";
    case ValueKind::Tensor: return tensor().describe();
    case ValueKind::Tuple: {
      std::string text = "(";
      auto items = tuple();
      for (std::size_t i = 0; i < items.size(); ++i) {
        if (i) text += ", ";
        text += items[i].kind() == ValueKind::Int ? std::to_string(items[i].asInt()) : items[i].describe();
      }
      if (items.size() == 1) text += ",";
      return text + ")";
    }
  }
  return "?";
}

}  // namespace shapevm
