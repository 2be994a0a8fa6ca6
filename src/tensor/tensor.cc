// SPDX-License-Identifier: Apache-2.0
// Tensor, Shape and Storage implementation: layout checks, views and copies.
#include "shapevm/tensor.h"

#include <cstring>
#include <limits>
#include <new>
#include <vector>

#include "support/tunables.h"

namespace shapevm {
namespace {

// Per-thread free lists for the fixed-size TensorImpl and Storage objects, so producing an op
// output costs no malloc/free in steady state. Each list is a plain thread_local array (trivial:
// one TLS access per take/give, no guard); a thread_local Flusher, made on the thread's first
// give, frees what the lists hold at thread exit. Blocks freed after that (static destructors at
// exit) go straight back to operator delete.
struct FreeList {
  static constexpr std::uint32_t kMaxCached = 1024;
  void* blocks[kMaxCached];
  std::uint32_t count;
  bool flusher_made;
  bool destroyed;
};

template <typename T>
class ObjectPool {
 public:
  static void* take() {
    FreeList& list = list_;
    if (list.count > 0) return list.blocks[--list.count];
    return ::operator new(sizeof(T));
  }
  static void give(void* block) {
    FreeList& list = list_;
    if (!list.destroyed && list.count < FreeList::kMaxCached) {
      if (!list.flusher_made) makeFlusher(list);
      list.blocks[list.count++] = block;
      return;
    }
    ::operator delete(block);
  }

 private:
  struct Flusher {
    FreeList* list;
    ~Flusher() {
      for (std::uint32_t i = 0; i < list->count; ++i) ::operator delete(list->blocks[i]);
      list->count = 0;
      list->destroyed = true;
    }
  };
  static void makeFlusher(FreeList& list) {
    list.flusher_made = true;
    thread_local Flusher flusher{&list};
    (void)flusher;
  }
  static thread_local constinit FreeList list_;
};
template <typename T>
thread_local constinit FreeList ObjectPool<T>::list_{};

TensorImpl* newTensorImpl() { return new (ObjectPool<TensorImpl>::take()) TensorImpl(); }
void deleteTensorImpl(TensorImpl* impl) {
  impl->~TensorImpl();
  ObjectPool<TensorImpl>::give(impl);
}

}  // namespace

Shape::Shape(std::initializer_list<std::int64_t> dims) {
  for (std::int64_t d : dims) {
    if (rank_ == kMaxRank) break;
    dims_[rank_++] = d;
  }
}

Shape::Shape(std::span<const std::int64_t> dims) {
  for (std::int64_t d : dims) {
    if (rank_ == kMaxRank) break;
    dims_[rank_++] = d;
  }
}

Expected<Shape> Shape::from(std::span<const std::int64_t> dims) {
  if (dims.size() > static_cast<std::size_t>(kMaxRank)) {
    return makeError(ErrorCode::Unsupported, "rank {} exceeds the maximum rank {}", dims.size(), kMaxRank);
  }
  return Shape(dims);
}

std::int64_t Shape::numel() const {
  std::int64_t n = 1;
  for (int i = 0; i < rank_; ++i) n *= dims_[i];
  return n;
}

std::string Shape::toString() const {
  std::string out = "[";
  for (int i = 0; i < rank_; ++i) {
    if (i) out += ',';
    out += std::to_string(dims_[i]);
  }
  return out + "]";
}

Shape contiguousStrides(const Shape& shape) {
  Shape strides;
  strides.resize(shape.rank());
  std::int64_t step = 1;
  for (int i = shape.rank() - 1; i >= 0; --i) {
    strides[i] = step;
    step *= shape[i] > 0 ? shape[i] : 1;
  }
  return strides;
}

// ---- Storage ----

Expected<Storage*> Storage::allocate(std::size_t nbytes) {
  std::size_t capacity = 0;
  SVM_ASSIGN_OR_RETURN(void* data, CachingAllocator::global().allocate(nbytes, &capacity));
  auto* storage = new (ObjectPool<Storage>::take()) Storage();
  storage->data_ = data;
  storage->nbytes_ = nbytes;
  storage->capacity_ = capacity;
  return storage;
}

Status requireCpu(const Tensor& tensor, std::string_view what) {
  if (!tensor.defined() || tensor.device().isCpu()) return Status::ok();
  return makeError(ErrorCode::Unsupported,
                   "{}: {} lives on {}, and this code reads host memory only (copy it to the cpu first)", what,
                   tensor.describe(), tensor.device().toString());
}

std::string Device::toString() const {
  switch (kind) {
    case DeviceKind::Cpu: return index == 0 ? "cpu" : fmt::format("cpu:{}", index);
    case DeviceKind::Cuda: return fmt::format("cuda:{}", index);
  }
  return fmt::format("device{}:{}", static_cast<int>(kind), index);
}

Storage* Storage::adopt(void* data, std::size_t nbytes, void (*release)(void*), void* release_context, Device device) {
  auto* storage = new (ObjectPool<Storage>::take()) Storage();
  storage->device_ = device;
  storage->data_ = data;
  storage->nbytes_ = nbytes;
  storage->external_ = true;
  storage->release_ = release;
  storage->release_context_ = release_context;
  return storage;
}

void Storage::releaseRef() {
  if (refs_.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  if (external_) {
    if (release_ != nullptr) release_(release_context_);
  } else {
    CachingAllocator::global().free(data_, capacity_);
  }
  this->~Storage();
  ObjectPool<Storage>::give(this);
}

// ---- Tensor ----

Tensor& Tensor::operator=(const Tensor& other) {
  if (impl_ != other.impl_) {
    Tensor copy(other);
    std::swap(impl_, copy.impl_);
  }
  return *this;
}

Tensor& Tensor::operator=(Tensor&& other) noexcept {
  if (this != &other) {
    release();
    impl_ = other.impl_;
    other.impl_ = nullptr;
  }
  return *this;
}

void Tensor::release() {
  if (impl_ == nullptr) return;
  if (impl_->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    if (impl_->storage) impl_->storage->releaseRef();
    deleteTensorImpl(impl_);
  }
  impl_ = nullptr;
}

Expected<Tensor> Tensor::empty(DType dtype, const Shape& shape) {
  std::size_t count = 1;
  for (std::int64_t d : shape) {
    if (d < 0) return makeError(ErrorCode::InvalidArgument, "negative extent in shape {}", shape.toString());
    if (d != 0 && count > std::numeric_limits<std::size_t>::max() / static_cast<std::size_t>(d) / 8) {
      return makeError(ErrorCode::OutOfMemory, "shape {} has too many elements", shape.toString());
    }
    count *= static_cast<std::size_t>(d);
  }
  SVM_ASSIGN_OR_RETURN(Storage * storage, Storage::allocate(count * dtypeSize(dtype)));
  auto* impl = newTensorImpl();
  impl->dtype = dtype;
  impl->shape = shape;
  impl->strides = contiguousStrides(shape);
  impl->contiguous = true;
  impl->storage = storage;
  return Tensor(impl);
}

Expected<Tensor> Tensor::zeros(DType dtype, const Shape& shape) {
  SVM_ASSIGN_OR_RETURN(Tensor t, empty(dtype, shape));
  std::memset(t.rawData(), 0, static_cast<std::size_t>(t.numel()) * t.itemSize());
  return t;
}

Tensor Tensor::scalar(double value, DType dtype) {
  Tensor t = std::move(empty(dtype, Shape{}).value());
  storeFromDouble(t.rawData(), dtype, 0, value);
  return t;
}

Tensor Tensor::wrap(void* data, DType dtype, const Shape& shape, const Shape& strides, std::size_t nbytes,
                    void (*release)(void*), void* release_context, Device device) {
  auto* impl = newTensorImpl();
  impl->dtype = dtype;
  impl->shape = shape;
  impl->strides = strides;
  impl->contiguous = layoutIsContiguous(shape, strides);
  impl->storage = Storage::adopt(data, nbytes, release, release_context, device);
  return Tensor(impl);
}

bool layoutIsContiguous(const Shape& shape, const Shape& strides) {
  if (shape.numel() == 0) return true;
  std::int64_t expected = 1;
  for (int i = shape.rank() - 1; i >= 0; --i) {
    if (shape[i] == 1) continue;
    if (strides[i] != expected) return false;
    expected *= shape[i];
  }
  return true;
}

Expected<Tensor> Tensor::asStrided(const Shape& shape, const Shape& strides, std::int64_t offset) const {
  if (shape.rank() != strides.rank()) {
    return makeError(ErrorCode::Internal, "asStrided: shape {} and strides {} differ in rank", shape.toString(),
                     strides.toString());
  }
  // Every reachable element must lie inside the storage.
  std::int64_t low = offset, high = offset;
  bool empty_view = false;
  for (int i = 0; i < shape.rank(); ++i) {
    if (shape[i] < 0) return makeError(ErrorCode::InvalidArgument, "asStrided: negative extent in {}", shape.toString());
    if (shape[i] == 0) empty_view = true;
    std::int64_t span = 0;
    if (shape[i] > 0 && (__builtin_mul_overflow(shape[i] - 1, strides[i], &span) ||
                         __builtin_add_overflow(span < 0 ? low : high, span, span < 0 ? &low : &high))) {
      return makeError(ErrorCode::IndexOutOfRange, "view {} with strides {} overflows the index range", shape.toString(),
                       strides.toString());
    }
  }
  auto capacity = static_cast<std::int64_t>(storage()->nbytes() / itemSize());
  if (!empty_view && (low < 0 || high >= capacity)) {
    return makeError(ErrorCode::IndexOutOfRange, "view {} strides {} offset {} leaves storage of {} elements",
                     shape.toString(), strides.toString(), offset, capacity);
  }
  auto* impl = newTensorImpl();
  impl->dtype = dtype();
  impl->shape = shape;
  impl->strides = strides;
  impl->contiguous = layoutIsContiguous(shape, strides);
  impl->offset = offset;
  impl->storage = storage();
  impl->storage->retain();
  return Tensor(impl);
}

Expected<Tensor> Tensor::reshapeView(const Shape& new_shape) const {
  if (new_shape.numel() != numel()) {
    return makeError(ErrorCode::ShapeMismatch, "cannot reshape {} ({} elements) to {} ({} elements)",
                     shape().toString(), numel(), new_shape.toString(), new_shape.numel());
  }
  if (isContiguous() || numel() == 0) return asStrided(new_shape, contiguousStrides(new_shape), offset());
  // General case: match groups of old dims to new dims; each old group must be "flat" in memory.
  Shape new_strides;
  new_strides.resize(new_shape.rank());
  int old_index = 0, new_index = 0;
  const int old_rank = rank(), new_rank = new_shape.rank();
  while (old_index < old_rank || new_index < new_rank) {
    // Skip unit dims on either side.
    if (new_index < new_rank && new_shape[new_index] == 1) {
      new_strides[new_index++] = 1;
      continue;
    }
    if (old_index < old_rank && dim(old_index) == 1) {
      ++old_index;
      continue;
    }
    if (old_index >= old_rank || new_index >= new_rank) break;
    int old_start = old_index, new_start = new_index;
    std::int64_t old_size = dim(old_index++), new_size = new_shape[new_index++];
    while (old_size != new_size) {
      if (old_size < new_size) old_size *= dim(old_index++);
      else new_size *= new_shape[new_index++];
    }
    // The group's non-unit dims must be nested without gaps (a unit dim's stride is meaningless).
    int previous = old_start;
    for (int i = old_start + 1; i < old_index; ++i) {
      if (dim(i) == 1) continue;
      if (stride(previous) != stride(i) * dim(i)) {
        return makeError(ErrorCode::Unsupported, "reshape of non-contiguous {} to {} needs a copy", describe(),
                         new_shape.toString());
      }
      previous = i;
    }
    std::int64_t step = stride(previous);
    for (int j = new_index - 1; j >= new_start; --j) {
      new_strides[j] = step;
      step *= new_shape[j];
    }
  }
  return asStrided(new_shape, new_strides, offset());
}

double Tensor::elementAsDouble(std::int64_t linear) const {
  std::int64_t position = offset();
  for (int i = rank() - 1; i >= 0; --i) {
    position += (linear % dim(i)) * stride(i);
    linear /= dim(i);
  }
  return loadAsDouble(storage()->data(), dtype(), position);
}

Expected<Tensor> Tensor::clone() const {
  SVM_RETURN_IF_ERROR(requireCpu(*this, "clone"));
  SVM_ASSIGN_OR_RETURN(Tensor out, empty(dtype(), shape()));
  const std::size_t item = itemSize();
  const std::int64_t n = numel();
  if (isContiguous()) {
    std::memcpy(out.rawData(), rawData(), static_cast<std::size_t>(n) * item);
    return out;
  }
  // Walk the view with an odometer over the logical index; copy the innermost dim as a run.
  const int r = rank();
  std::int64_t index[kMaxRank] = {};
  const char* base = static_cast<const char*>(storage()->data());
  char* dst = static_cast<char*>(out.rawData());
  const std::int64_t inner = r ? dim(r - 1) : 1;
  const std::int64_t inner_stride = r ? stride(r - 1) : 0;
  for (std::int64_t done = 0; done < n; done += inner) {
    std::int64_t position = offset();
    for (int i = 0; i + 1 < r; ++i) position += index[i] * stride(i);
    for (std::int64_t j = 0; j < inner; ++j) {
      std::memcpy(dst, base + (position + j * inner_stride) * static_cast<std::int64_t>(item), item);
      dst += item;
    }
    for (int i = r - 2; i >= 0; --i) {
      if (++index[i] < dim(i)) break;
      index[i] = 0;
    }
  }
  return out;
}

Expected<Tensor> Tensor::contiguous() const {
  if (isContiguous()) return *this;
  return clone();
}

std::string Tensor::describe() const {
  if (!defined()) return "<undefined tensor>";
  std::string text = std::string(dtypeShortName(dtype())) + shape().toString();
  if (!isContiguous()) text += "/s" + strides().toString();
  if (!device().isCpu()) text += "@" + device().toString();
  return text;
}

}  // namespace shapevm
