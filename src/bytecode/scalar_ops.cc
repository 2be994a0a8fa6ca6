// SPDX-License-Identifier: Apache-2.0
// Scalar arithmetic with Python semantics (see scalar_ops.h).
#include "bytecode/scalar_ops.h"

#include <cmath>
#include <limits>

namespace shapevm {
namespace {

bool intLike(const Value& v) { return v.isInt() || v.isBool(); }
std::int64_t intOf(const Value& v) { return v.isInt() ? v.asInt() : static_cast<std::int64_t>(v.asBool()); }

// Names the operation's operands as the program gave them (never an intermediate value).
Status overflow(Opcode op, std::int64_t a, std::int64_t b) {
  return makeError(ErrorCode::InvalidArgument, "integer overflow in {} {} {} (the result does not fit in int64)", a,
                   opcodeName(op), b);
}
Status overflow(Opcode op, std::int64_t a) {
  return makeError(ErrorCode::InvalidArgument, "integer overflow in {} {} (the result does not fit in int64)",
                   opcodeName(op), a);
}

Expected<Value> intPow(const std::int64_t base, const std::int64_t exponent) {
  if (exponent < 0) return Value::fromFloat(std::pow(static_cast<double>(base), static_cast<double>(exponent)));
  std::int64_t result = 1, square = base;
  for (std::int64_t e = exponent; e > 0;) {
    if (e & 1) {
      if (__builtin_mul_overflow(result, square, &result)) return overflow(Opcode::Pow, base, exponent);
    }
    e >>= 1;
    if (e > 0 && __builtin_mul_overflow(square, square, &square)) return overflow(Opcode::Pow, base, exponent);
  }
  return Value::fromInt(result);
}

Expected<Value> compareValues(Opcode op, const Value& a, const Value& b) {
  if (a.isTuple() || b.isTuple()) {
    if (op != Opcode::Eq && op != Opcode::Ne) {
      return makeError(ErrorCode::KindMismatch, "{} cannot order {} and {}", opcodeName(op), a.describe(), b.describe());
    }
    bool equal = a.isTuple() && b.isTuple() && a.tuple().size() == b.tuple().size();
    for (std::size_t i = 0; equal && i < a.tuple().size(); ++i) {
      auto item = compareValues(Opcode::Eq, a.tuple()[i], b.tuple()[i]);
      equal = item && item->asBool();
    }
    return Value::fromBool(op == Opcode::Eq ? equal : !equal);
  }
  auto compare = [op](auto x, auto y) {
    switch (op) {
      case Opcode::Lt: return Value::fromBool(x < y);
      case Opcode::Le: return Value::fromBool(x <= y);
      case Opcode::Gt: return Value::fromBool(x > y);
      case Opcode::Ge: return Value::fromBool(x >= y);
      case Opcode::Eq: return Value::fromBool(x == y);
      default: return Value::fromBool(x != y);
    }
  };
  // Ints compare exactly (no trip through double); anything with a float compares as double.
  if (intLike(a) && intLike(b)) return compare(intOf(a), intOf(b));
  return compare(a.toDouble(), b.toDouble());
}

}  // namespace

Expected<bool> truthValue(const Value& v) {
  switch (v.kind()) {
    case ValueKind::Bool: return v.asBool();
    case ValueKind::Int: return v.asInt() != 0;
    case ValueKind::Float: return v.asFloat() != 0.0;
    case ValueKind::Tensor:
      if (v.tensor().numel() == 1) return v.tensor().elementAsDouble(0) != 0.0;
      return makeError(ErrorCode::ShapeMismatch, "the truth value of a tensor with shape {} is ambiguous (needs exactly one element)",
                       v.tensor().shape().toString());
    case ValueKind::Tuple: return !v.tuple().empty();
    case ValueKind::None: return false;
  }
  return false;
}

Expected<Value> scalarBinary(Opcode op, const Value& a, const Value& b) {
  if (op >= Opcode::Lt && op <= Opcode::Ne) return compareValues(op, a, b);
  if (!a.isScalar() || !b.isScalar()) {
    return makeError(ErrorCode::KindMismatch, "{} needs int, float or bool operands, got {} and {}", opcodeName(op),
                     a.describe(), b.describe());
  }
  if (op == Opcode::And || op == Opcode::Or) {
    SVM_ASSIGN_OR_RETURN(bool x, truthValue(a));
    SVM_ASSIGN_OR_RETURN(bool y, truthValue(b));
    return Value::fromBool(op == Opcode::And ? (x && y) : (x || y));
  }
  if (op == Opcode::Min || op == Opcode::Max) {
    bool pick_b = op == Opcode::Min ? b.toDouble() < a.toDouble() : b.toDouble() > a.toDouble();
    if (intLike(a) && intLike(b)) pick_b = op == Opcode::Min ? intOf(b) < intOf(a) : intOf(b) > intOf(a);
    return pick_b ? b : a;
  }
  if (intLike(a) && intLike(b) && op != Opcode::Div) {
    std::int64_t x = intOf(a), y = intOf(b), r = 0;
    switch (op) {
      case Opcode::Add:
        if (__builtin_add_overflow(x, y, &r)) return overflow(op, x, y);
        return Value::fromInt(r);
      case Opcode::Sub:
        if (__builtin_sub_overflow(x, y, &r)) return overflow(op, x, y);
        return Value::fromInt(r);
      case Opcode::Mul:
        if (__builtin_mul_overflow(x, y, &r)) return overflow(op, x, y);
        return Value::fromInt(r);
      case Opcode::FloorDiv:
      case Opcode::Mod: {
        if (y == 0) return makeError(ErrorCode::InvalidArgument, "integer {} by zero ({} {} 0)", op == Opcode::Mod ? "modulo" : "division", x, opcodeName(op));
        if (x == std::numeric_limits<std::int64_t>::min() && y == -1) return overflow(op, x, y);
        std::int64_t q = x / y, m = x % y;
        if (m != 0 && ((m < 0) != (y < 0))) { --q; m += y; }
        return Value::fromInt(op == Opcode::FloorDiv ? q : m);
      }
      case Opcode::Pow: return intPow(x, y);
      default: break;
    }
  }
  double x = a.toDouble(), y = b.toDouble();
  switch (op) {
    case Opcode::Add: return Value::fromFloat(x + y);
    case Opcode::Sub: return Value::fromFloat(x - y);
    case Opcode::Mul: return Value::fromFloat(x * y);
    case Opcode::Div:
      if (y == 0.0) return makeError(ErrorCode::InvalidArgument, "division by zero ({} / 0)", a.describe());
      return Value::fromFloat(x / y);
    case Opcode::FloorDiv:
    case Opcode::Mod: {
      if (y == 0.0) return makeError(ErrorCode::InvalidArgument, "float {} by zero", op == Opcode::Mod ? "modulo" : "floor division");
      // CPython's float_divmod: exact mod, then a floored quotient corrected for rounding.
      double mod = std::fmod(x, y);
      double div = (x - mod) / y;
      if (mod != 0.0 && ((y < 0) != (mod < 0))) {
        mod += y;
        div -= 1.0;
      }
      if (op == Opcode::Mod) return Value::fromFloat(mod);
      double floored = std::floor(div);
      if (div - floored > 0.5) floored += 1.0;
      return Value::fromFloat(floored);
    }
    case Opcode::Pow: return Value::fromFloat(std::pow(x, y));
    default: break;
  }
  return makeError(ErrorCode::Internal, "{} is not a scalar binary opcode", opcodeName(op));
}

Expected<Value> scalarUnary(Opcode op, const Value& a) {
  if (op == Opcode::Not) {
    SVM_ASSIGN_OR_RETURN(bool truth, truthValue(a));
    return Value::fromBool(!truth);
  }
  if (op == Opcode::ToBool) {
    SVM_ASSIGN_OR_RETURN(bool truth, truthValue(a));
    return Value::fromBool(truth);
  }
  // int()/float() also accept a one-element tensor, as Python does for arrays.
  Value scalar = a;
  if (a.isTensor() && (op == Opcode::ToInt || op == Opcode::ToFloat) && a.tensor().numel() == 1) {
    double v = a.tensor().elementAsDouble(0);
    scalar = isFloating(a.tensor().dtype()) ? Value::fromFloat(v) : Value::fromInt(static_cast<std::int64_t>(v));
  }
  if (!scalar.isScalar()) {
    return makeError(ErrorCode::KindMismatch, "{} needs an int, float or bool, got {}", opcodeName(op), a.describe());
  }
  switch (op) {
    case Opcode::Neg:
      if (intLike(scalar)) {
        if (intOf(scalar) == std::numeric_limits<std::int64_t>::min()) return overflow(op, intOf(scalar));
        return Value::fromInt(-intOf(scalar));
      }
      return Value::fromFloat(-scalar.asFloat());
    case Opcode::Abs:
      if (intLike(scalar)) {
        if (intOf(scalar) == std::numeric_limits<std::int64_t>::min()) return overflow(op, intOf(scalar));
        return Value::fromInt(std::llabs(intOf(scalar)));
      }
      return Value::fromFloat(std::fabs(scalar.asFloat()));
    case Opcode::ToInt: {
      if (intLike(scalar)) return Value::fromInt(intOf(scalar));
      double v = scalar.asFloat();
      if (!std::isfinite(v) || std::fabs(v) >= 9.2e18) {
        return makeError(ErrorCode::InvalidArgument, "cannot convert float {} to int", v);
      }
      return Value::fromInt(static_cast<std::int64_t>(v));
    }
    case Opcode::ToFloat: return Value::fromFloat(scalar.toDouble());
    default: break;
  }
  return makeError(ErrorCode::Internal, "{} is not a scalar unary opcode", opcodeName(op));
}

}  // namespace shapevm
