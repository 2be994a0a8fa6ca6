// SPDX-License-Identifier: Apache-2.0
// Value: what a VM register holds — None, int (int64), float (double), bool, Tensor, or an
// immutable tuple of Values (shapes are tuples of ints). 16 bytes; copying a tensor or tuple
// bumps a refcount.
#pragma once

#include <atomic>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "shapevm/tensor.h"

namespace shapevm {

enum class ValueKind : std::uint8_t { None, Int, Float, Bool, Tensor, Tuple };
std::string_view valueKindName(ValueKind kind);

class Value;
struct TupleImpl {
  std::atomic<std::int32_t> refs{1};
  std::vector<Value> items;
};

class Value {
 public:
  Value() : kind_(ValueKind::None), i_(0) {}
  static Value fromInt(std::int64_t v) { Value out; out.kind_ = ValueKind::Int; out.i_ = v; return out; }
  static Value fromFloat(double v) { Value out; out.kind_ = ValueKind::Float; out.f_ = v; return out; }
  static Value fromBool(bool v) { Value out; out.kind_ = ValueKind::Bool; out.b_ = v; return out; }
  static Value fromTensor(Tensor t);
  static Value fromTuple(std::vector<Value> items);
  static Value fromInts(std::span<const std::int64_t> items);

  Value(const Value& other) : kind_(other.kind_), i_(other.i_) { retain(); }
  Value(Value&& other) noexcept : kind_(other.kind_), i_(other.i_) { other.kind_ = ValueKind::None; }
  Value& operator=(const Value& other);
  Value& operator=(Value&& other) noexcept;
  ~Value() { release(); }

  ValueKind kind() const { return kind_; }
  bool isNone() const { return kind_ == ValueKind::None; }
  bool isInt() const { return kind_ == ValueKind::Int; }
  bool isFloat() const { return kind_ == ValueKind::Float; }
  bool isBool() const { return kind_ == ValueKind::Bool; }
  bool isScalar() const { return kind_ == ValueKind::Int || kind_ == ValueKind::Float || kind_ == ValueKind::Bool; }
  bool isTensor() const { return kind_ == ValueKind::Tensor; }
  bool isTuple() const { return kind_ == ValueKind::Tuple; }

  std::int64_t asInt() const { return i_; }      // caller checked isInt()
  double asFloat() const { return f_; }          // caller checked isFloat()
  bool asBool() const { return b_; }             // caller checked isBool()
  // Int/Bool/Float as double (Python numeric promotion).
  double toDouble() const { return kind_ == ValueKind::Float ? f_ : kind_ == ValueKind::Int ? static_cast<double>(i_) : (b_ ? 1.0 : 0.0); }
  // The tensor (a borrowed reference; valid while this Value lives).
  const Tensor& tensor() const { return *reinterpret_cast<const Tensor*>(&t_); }
  // Moves the tensor out, leaving None (caller checked isTensor()).
  Tensor takeTensor() {
    Tensor out = std::move(*reinterpret_cast<Tensor*>(&t_));
    kind_ = ValueKind::None;
    return out;
  }
  std::span<const Value> tuple() const { return {tup_->items.data(), tup_->items.size()}; }

  // Conversions with a clear error naming `what` ("reshape: shape").
  Expected<std::int64_t> toInt(std::string_view what) const;
  // An int, or a tuple of ints, as a list of ints.
  Expected<std::vector<std::int64_t>> toInts(std::string_view what) const;

  // Short description for errors and the debugger: "f32[2,3]", "int 5", "(3, 4)".
  std::string describe() const;

 private:
  void retain();
  void release();
  ValueKind kind_;
  union {
    std::int64_t i_;
    double f_;
    bool b_;
    TensorImpl* t_;  // reinterpreted as Tensor (a Tensor is exactly one TensorImpl*)
    TupleImpl* tup_;
  };
};
static_assert(sizeof(Tensor) == sizeof(TensorImpl*), "Value stores a Tensor as its impl pointer");

}  // namespace shapevm
