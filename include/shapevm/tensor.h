// SPDX-License-Identifier: Apache-2.0
// Tensor: dtype + shape + strides + offset over shared, 64-byte-aligned, refcounted Storage.
// A Tensor is a cheap handle (one pointer) to an immutable-layout TensorImpl; views made with
// asStrided()/reshapeView() share storage, contiguous() copies only when the layout needs it.
// Invariant: every element reachable through shape/strides/offset lies inside the storage.
#pragma once

#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>

#include "shapevm/dtype.h"
#include "shapevm/status.h"

namespace shapevm {

inline constexpr int kMaxRank = 8;

// A small fixed-capacity list of extents (also used for strides).
class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<std::int64_t> dims);
  explicit Shape(std::span<const std::int64_t> dims);  // rank must be <= kMaxRank (checked by from())
  static Expected<Shape> from(std::span<const std::int64_t> dims);

  int rank() const { return rank_; }
  std::int64_t operator[](int i) const { return dims_[i]; }
  std::int64_t& operator[](int i) { return dims_[i]; }
  const std::int64_t* data() const { return dims_; }
  std::int64_t* data() { return dims_; }
  const std::int64_t* begin() const { return dims_; }
  const std::int64_t* end() const { return dims_ + rank_; }
  std::span<const std::int64_t> span() const { return {dims_, static_cast<std::size_t>(rank_)}; }
  void push_back(std::int64_t d) { dims_[rank_++] = d; }  // caller keeps rank < kMaxRank
  void resize(int rank) {
    for (int i = rank_; i < rank; ++i) dims_[i] = 0;
    rank_ = static_cast<std::int8_t>(rank);
  }
  std::int64_t numel() const;
  bool operator==(const Shape& other) const {
    if (rank_ != other.rank_) return false;
    for (int i = 0; i < rank_; ++i) {
      if (dims_[i] != other.dims_[i]) return false;
    }
    return true;
  }
  bool operator!=(const Shape& other) const { return !(*this == other); }
  std::string toString() const;  // "[2,3,4]"

 private:
  std::int8_t rank_ = 0;
  std::int64_t dims_[kMaxRank] = {};
};

// Row-major strides (in elements) of a contiguous tensor of this shape.
Shape contiguousStrides(const Shape& shape);

// Where a storage's bytes live. Everything ShapeVM allocates today is host memory (Cpu); a
// device backend (docs/gpu-backend.md) adopts its own memory with its kind, and every kernel
// checks the device of its operands before it touches their bytes.
enum class DeviceKind : std::uint8_t { Cpu, Cuda };
struct Device {
  DeviceKind kind = DeviceKind::Cpu;
  int index = 0;  // which device of that kind (0 for the host)
  bool isCpu() const { return kind == DeviceKind::Cpu; }
  bool operator==(const Device&) const = default;
  std::string toString() const;  // "cpu", "cuda:1"
};
inline constexpr Device kCpuDevice{};

// Refcounted buffer. Memory comes from the CachingAllocator (host memory) unless adopted from
// outside (then `release` is called with `release_context` when the last reference goes).
class Storage {
 public:
  static Expected<Storage*> allocate(std::size_t nbytes);
  static Storage* adopt(void* data, std::size_t nbytes, void (*release)(void*), void* release_context,
                        Device device = kCpuDevice);
  void* data() const { return data_; }
  std::size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  void retain() { refs_.fetch_add(1, std::memory_order_relaxed); }
  void releaseRef();
  // One reference and memory from the CachingAllocator: its bytes may be overwritten in place.
  bool isSoleOwner() const { return !external_ && refs_.load(std::memory_order_acquire) == 1; }
  // Adopted memory (Tensor::wrap, e.g. a numpy array): its owner may change the bytes at any
  // time, so nothing derived from them may be cached.
  bool isExternal() const { return external_; }

 private:
  Storage() = default;
  std::atomic<std::int32_t> refs_{1};
  void* data_ = nullptr;
  std::size_t nbytes_ = 0;
  std::size_t capacity_ = 0;
  bool external_ = false;  // adopted memory: never returned to the CachingAllocator
  Device device_;          // allocated storage is always host memory
  void (*release_)(void*) = nullptr;
  void* release_context_ = nullptr;
};

struct TensorImpl {
  std::atomic<std::int32_t> refs{1};
  DType dtype = DType::Float32;
  Shape shape;
  Shape strides;
  std::int64_t offset = 0;  // in elements
  Storage* storage = nullptr;
  bool contiguous = true;   // row-major without gaps (size-1 dims ignored); fixed at creation
};

// True when `strides` walk `shape` in row-major order without gaps (size-1 dims ignored).
bool layoutIsContiguous(const Shape& shape, const Shape& strides);

class Tensor {
 public:
  Tensor() = default;
  Tensor(const Tensor& other) : impl_(other.impl_) { retain(); }
  Tensor(Tensor&& other) noexcept : impl_(other.impl_) { other.impl_ = nullptr; }
  Tensor& operator=(const Tensor& other);
  Tensor& operator=(Tensor&& other) noexcept;
  ~Tensor() { release(); }

  // Uninitialized contiguous tensor. Fails with OutOfMemory beyond the MaxTensorBytes tunable
  // and InvalidArgument for negative extents or rank > kMaxRank.
  static Expected<Tensor> empty(DType dtype, const Shape& shape);
  static Expected<Tensor> zeros(DType dtype, const Shape& shape);
  // 0-d tensor holding `value` converted to `dtype`.
  static Tensor scalar(double value, DType dtype);
  // Wraps external memory without copying (e.g. a numpy array); `release` runs when unused.
  // `device`: where `data` lives (a device pointer is never dereferenced by host code).
  static Tensor wrap(void* data, DType dtype, const Shape& shape, const Shape& strides, std::size_t nbytes,
                     void (*release)(void*), void* release_context, Device device = kCpuDevice);

  bool defined() const { return impl_ != nullptr; }
  DType dtype() const { return impl_->dtype; }
  int rank() const { return impl_->shape.rank(); }
  const Shape& shape() const { return impl_->shape; }
  std::int64_t dim(int axis) const { return impl_->shape[axis]; }
  const Shape& strides() const { return impl_->strides; }
  std::int64_t stride(int axis) const { return impl_->strides[axis]; }
  std::int64_t offset() const { return impl_->offset; }
  std::int64_t numel() const { return impl_->shape.numel(); }
  std::size_t itemSize() const { return dtypeSize(impl_->dtype); }
  bool isContiguous() const { return impl_->contiguous; }
  Storage* storage() const { return impl_->storage; }
  Device device() const { return impl_->storage->device(); }
  // Nothing else can observe this tensor's elements (this handle is the only reference to its
  // impl and the impl the only reference to its storage).
  bool isSoleOwner() const {
    return impl_->refs.load(std::memory_order_acquire) == 1 && impl_->storage->isSoleOwner();
  }
  bool sharesStorageWith(const Tensor& other) const { return impl_->storage == other.impl_->storage; }

  // Address of the element at offset 0 of the view (storage base + offset).
  void* rawData() const {
    return static_cast<char*>(impl_->storage->data()) + impl_->offset * static_cast<std::int64_t>(itemSize());
  }
  template <typename T>
  T* data() const { return static_cast<T*>(rawData()); }

  // A view over the same storage; bounds are checked against the storage size.
  Expected<Tensor> asStrided(const Shape& shape, const Shape& strides, std::int64_t offset) const;
  // A view with a new shape when the layout allows it without copying; error otherwise.
  Expected<Tensor> reshapeView(const Shape& shape) const;
  // This tensor if already contiguous, else a contiguous copy.
  Expected<Tensor> contiguous() const;
  // Always a fresh contiguous copy.
  Expected<Tensor> clone() const;
  // Element `linear` in row-major order of the logical shape, as double (any dtype).
  double elementAsDouble(std::int64_t linear) const;

  // "f32[2,3]" (non-contiguous views add their strides: "f32[2,3]/s[1,2]").
  std::string describe() const;

 private:
  explicit Tensor(TensorImpl* impl) : impl_(impl) {}
  void retain() {
    if (impl_) impl_->refs.fetch_add(1, std::memory_order_relaxed);
  }
  void release();
  TensorImpl* impl_ = nullptr;
};

// Process-wide caching allocator: freed blocks are kept per size class and reused.
struct AllocatorStats {
  std::int64_t requests = 0;            // every allocate() call
  std::int64_t system_allocations = 0;  // calls that reached the system allocator
  std::int64_t live_bytes = 0;          // bytes handed out and not yet freed (rounded to class)
  std::int64_t peak_bytes = 0;          // maximum of live_bytes
  std::int64_t cached_bytes = 0;        // freed bytes held for reuse
  // At most this many free bytes of the JIT's scratch area (lowered threads' blocks of 16 KiB and
  // more) hold pages for the next compile's use; releaseScratch() returns those past its first 16 MiB.
  std::int64_t scratch_bytes = 0;
};

class CachingAllocator {
 public:
  static CachingAllocator& global();
  // 64-byte aligned block of at least `nbytes`; `capacity` receives the size class.
  Expected<void*> allocate(std::size_t nbytes, std::size_t* capacity);
  void free(void* ptr, std::size_t capacity);
  AllocatorStats stats() const;
  void resetPeak();
  // Returns every cached block, and the scratch area's free pages, to the system.
  void trim();
  // Returns the scratch area's free pages past its first 16 MiB to the system (the JIT calls it when
  // it goes idle; the next compile's first blocks land in the pages kept).
  void releaseScratch();
  static std::size_t sizeClass(std::size_t nbytes);

 private:
  CachingAllocator() = default;
  struct Impl;
  Impl& impl() const;
};

// OK for an undefined or host tensor; else an Unsupported error naming `what`, the tensor and its
// device. Host code (reference kernels, CPU kernels, copies) calls it before touching bytes.
Status requireCpu(const Tensor& tensor, std::string_view what);

}  // namespace shapevm
