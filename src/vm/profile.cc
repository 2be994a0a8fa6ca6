// SPDX-License-Identifier: Apache-2.0
// ProfileBuffer recording and snapshots; dispatch-slot signature keys and guard checks.
#include "vm/profile.h"

#include "vm/dispatch_slot.h"

namespace shapevm {

ProfileBuffer::ProfileBuffer(std::size_t capacity)
    : slots_(std::make_unique<Slot[]>(capacity == 0 ? 1 : capacity)), capacity_(capacity == 0 ? 1 : capacity) {}

bool ProfileBuffer::matches(const Slot& slot, std::span<const Value* const> inputs) {
  if (slot.inputs.size() != inputs.size()) return false;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const OperandProfile& p = slot.inputs[i];
    const Value* v = inputs[i];
    bool is_tensor = v != nullptr && v->isTensor();
    if (p.is_tensor != is_tensor) return false;
    if (!is_tensor) {
      if (p.kind != (v == nullptr ? ValueKind::None : v->kind())) return false;
      continue;
    }
    const Tensor& t = v->tensor();
    if (t.dtype() != p.dtype || t.shape() != p.shape || t.strides() != p.strides) return false;
  }
  return true;
}

void ProfileBuffer::bump(Slot& slot, std::uint64_t call_number) {
  slot.count.store(slot.count.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  slot.last_seen.store(call_number, std::memory_order_relaxed);
}

void ProfileBuffer::record(std::span<const Value* const> inputs, std::uint64_t call_number) {
  const std::size_t size = size_.load(std::memory_order_relaxed);
  if (size > 0 && matches(slots_[newest_], inputs)) {
    bump(slots_[newest_], call_number);
    return;
  }
  for (std::size_t i = 0; i < size; ++i) {
    if (matches(slots_[i], inputs)) {
      newest_ = i;
      bump(slots_[i], call_number);
      return;
    }
  }
  std::vector<OperandProfile> profile;
  profile.reserve(inputs.size());
  for (const Value* v : inputs) {
    OperandProfile p;
    if (v != nullptr && v->isTensor()) {
      p.is_tensor = true;
      p.dtype = v->tensor().dtype();
      p.shape = v->tensor().shape();
      p.strides = v->tensor().strides();
    } else if (v != nullptr) {
      p.kind = v->kind();
      if (v->isInt() || v->isFloat() || v->isBool()) p.scalar = v->toDouble();
    }
    profile.push_back(p);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  std::size_t target = size;
  if (size < capacity_) {
    size_.store(size + 1, std::memory_order_relaxed);
  } else {
    target = 0;  // evict the least recently seen record
    for (std::size_t i = 1; i < size; ++i) {
      if (slots_[i].last_seen.load(std::memory_order_relaxed) < slots_[target].last_seen.load(std::memory_order_relaxed)) target = i;
    }
    evictions_.fetch_add(1, std::memory_order_relaxed);
  }
  Slot& slot = slots_[target];
  slot.inputs = std::move(profile);
  slot.count.store(1, std::memory_order_relaxed);
  slot.last_seen.store(call_number, std::memory_order_relaxed);
  newest_ = target;
}

std::vector<ProfileRecord> ProfileBuffer::snapshot() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<ProfileRecord> out;
  const std::size_t size = size_.load(std::memory_order_relaxed);
  for (std::size_t i = 0; i < size; ++i) {
    out.push_back(ProfileRecord{slots_[i].inputs, slots_[i].count.load(std::memory_order_relaxed),
                                slots_[i].last_seen.load(std::memory_order_relaxed)});
  }
  return out;
}

std::string ProfileRecord::toString() const {
  std::string text;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (i) text += " x ";
    if (!inputs[i].is_tensor) {
      text += "_";
      continue;
    }
    text += std::string(dtypeShortName(inputs[i].dtype));
    std::string dims = "(";
    for (int d = 0; d < inputs[i].shape.rank(); ++d) dims += (d ? "," : "") + std::to_string(inputs[i].shape[d]);
    text += dims + ")";
  }
  return text;
}

std::uint64_t signatureKey(std::span<const Value* const> inputs) {
  // Per input one byte: bit 7 tensor, bits 4-6 dtype, bit 3 contiguous, bits 0-2 rank (0..7).
  // Rank 8, more than 7 inputs or a tensor off the CPU: uncacheable (~0), resolved (and its
  // inputs checked, which refuses the device) on every call.
  if (inputs.size() > 7) return ~std::uint64_t{0};
  std::uint64_t key = 0;
  const Shape* first = nullptr;
  bool same_shape = true;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const Value* v = inputs[i];
    std::uint64_t byte = 0;
    if (v != nullptr && v->isTensor()) {
      const Tensor& t = v->tensor();
      if (t.rank() >= 8 || !t.device().isCpu()) return ~std::uint64_t{0};
      byte = 0x80u | (static_cast<std::uint64_t>(t.dtype()) << 4) | static_cast<std::uint64_t>(t.rank());
      if (t.isContiguous()) byte |= 0x08u;
      if (first == nullptr) first = &t.shape();
      else if (same_shape && t.shape() != *first) same_shape = false;
    } else {
      same_shape = false;
      byte = v == nullptr ? 0x01u : 0x02u + static_cast<std::uint64_t>(v->kind());
    }
    key |= byte << (8 * i);
  }
  return key | (static_cast<std::uint64_t>(same_shape) << 56);
}

bool Guard::passes(std::span<const Value* const> values) const {
  if (values.size() != inputs.size()) return false;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const InputGuard& g = inputs[i];
    const Value* v = values[i];
    if (!g.is_tensor) {
      if ((v == nullptr ? ValueKind::None : v->kind()) != g.scalar_kind) return false;
      continue;
    }
    if (v == nullptr || !v->isTensor()) return false;
    const Tensor& t = v->tensor();
    if (t.dtype() != g.dtype || t.rank() != g.rank) return false;
    if (g.require_contiguous && !t.isContiguous()) return false;
    for (int d = 0; d < g.rank; ++d) {
      if (!g.dims[d].accepts(t.dim(d))) return false;
    }
  }
  return true;
}

}  // namespace shapevm
