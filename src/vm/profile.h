// SPDX-License-Identifier: Apache-2.0
// ProfileBuffer: a bounded history of the distinct (shape, dtype, strides) signatures a CallOp
// site has seen, with a count each. Recording compares with the newest record first, so a
// site whose signature does not change pays one comparison. Read by the JIT's shape inference
// under the buffer's mutex (the interpreter holds it only when a new signature appears).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "shapevm/value.h"

namespace shapevm {

struct OperandProfile {
  bool is_tensor = false;
  DType dtype = DType::Float32;
  Shape shape;
  Shape strides;
  ValueKind kind = ValueKind::None;  // non-tensors: None (omitted input), Int, Float, Bool, Tuple
  double scalar = 0.0;               // non-tensors: the value when first recorded (an example)
  bool operator==(const OperandProfile& other) const {
    return is_tensor == other.is_tensor && dtype == other.dtype && shape == other.shape && strides == other.strides &&
           kind == other.kind;
  }
};

// A snapshot of one record.
struct ProfileRecord {
  std::vector<OperandProfile> inputs;
  std::uint64_t count = 0;
  std::uint64_t last_seen = 0;  // site call number when last seen
  std::string toString() const; // "f32(640,128) x f32(128,1024)"
};

// Single writer (the interpreter thread), any number of readers (the JIT). The writer
// compares against the newest record without locking (only it changes the records' contents)
// and bumps that record's atomic count; it takes the mutex only to add or evict a record,
// which is also what snapshot() holds while copying.
class ProfileBuffer {
 public:
  explicit ProfileBuffer(std::size_t capacity = 16);
  void record(std::span<const Value* const> inputs, std::uint64_t call_number);
  std::vector<ProfileRecord> snapshot() const;
  std::uint64_t evictions() const { return evictions_.load(std::memory_order_relaxed); }

 private:
  struct Slot {
    std::vector<OperandProfile> inputs;
    std::atomic<std::uint64_t> count{0};
    std::atomic<std::uint64_t> last_seen{0};
  };
  static bool matches(const Slot& slot, std::span<const Value* const> inputs);
  static void bump(Slot& slot, std::uint64_t call_number);
  mutable std::mutex mutex_;
  std::unique_ptr<Slot[]> slots_;
  std::size_t capacity_ = 0;
  std::atomic<std::size_t> size_{0};
  std::size_t newest_ = 0;
  std::atomic<std::uint64_t> evictions_{0};
};

}  // namespace shapevm
