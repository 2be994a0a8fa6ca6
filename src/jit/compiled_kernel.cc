// SPDX-License-Identifier: Apache-2.0
// Calling generated kernels: output allocation, the KernelArgs block, packed operands (cached
// per kernel), fault injection.
#include "jit/compiled_kernel.h"

#include "jit/compile_cancel.h"
#include "jit/fusion.h"
#include "jit/kernel_cache.h"
#include "support/cpu_cores.h"
#include "support/thread_pool.h"
#include "support/tunables.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>

namespace shapevm::jit {

namespace {

// kernel_threads=auto splits a row-split kernel only into tasks of at least this many outputs
// (128 KB of float32: tens of microseconds of work, against a few for waking the pool).
constexpr std::int64_t kMinAutoElementsPerTask = std::int64_t{1} << 15;

// The same bytes: one storage, and the same view of it.
bool sameView(const Tensor& a, const Tensor& b) {
  return a.storage() == b.storage() && a.offset() == b.offset() && a.dtype() == b.dtype() && a.shape() == b.shape() &&
         a.strides() == b.strides();
}

// The packing of the kernel's packable input for this call: cached, or packed now by the kernel
// itself (PackMode::PackOnly) and cached; `args` are then pointed at it. Undefined (args
// unchanged: the kernel packs as it goes) when nothing is packable, the operand may not be cached
// or the buffer cannot be had. The caller keeps the result until the call returns.
Tensor packedOperandFor(const CompiledKernel& kernel, std::span<const Value* const> inputs, KernelArgs& args) {
  const PackedOperand operand = kernel.family->packedOperand(kernel.spec, args);
  if (operand.input < 0 || operand.bytes <= 0 || static_cast<std::size_t>(operand.input) >= inputs.size()) return {};
  const Value* value = inputs[static_cast<std::size_t>(operand.input)];
  if (value == nullptr || !value->isTensor() || !kernel.packed.admits(value->tensor(), operand.any_size)) return {};
  const Tensor& source = value->tensor();
  Tensor packed = kernel.packed.find(source);
  if (!packed.defined()) {
    packed = kernel.packed.takeSpare(operand.bytes);  // validation's buffer: already faulted in
    if (!packed.defined()) {
      auto buffer = Tensor::empty(DType::Float32, Shape{(operand.bytes + 3) / 4});
      if (!buffer) return {};  // e.g. beyond MaxTensorBytes: the kernel packs as it goes
      packed = std::move(*buffer);
    }
    KernelArgs pack = args;
    kernel.family->usePacked(kernel.spec, pack, packed.rawData(), PackMode::PackOnly);
    kernel.backend->launch(kernel.handle, pack);
    kernel.packed.insert(source, packed);
  }
  kernel.family->usePacked(kernel.spec, args, packed.rawData(), PackMode::Read);
  return packed;
}

LaunchArgsCache::InputKey inputKey(const Value* value) {
  LaunchArgsCache::InputKey key;
  if (value == nullptr) return key;
  key.kind = value->kind();
  if (value->isTensor()) {
    const Tensor& t = value->tensor();
    key.dtype = t.dtype();
    key.shape = t.shape();
    key.strides = t.strides();
  } else if (value->isFloat()) {
    key.bits = std::bit_cast<std::uint64_t>(value->asFloat());
  } else if (value->isInt()) {
    key.bits = static_cast<std::uint64_t>(value->asInt());
  } else if (value->isBool()) {
    key.bits = value->asBool() ? 1 : 0;
  }
  return key;
}

bool sameKey(const LaunchArgsCache::InputKey& key, const Value* value) {
  if (value == nullptr) return key.kind == ValueKind::None;
  if (value->kind() != key.kind) return false;
  if (value->isTensor()) {
    const Tensor& t = value->tensor();
    return t.dtype() == key.dtype && t.shape() == key.shape && t.strides() == key.strides;
  }
  if (value->isFloat()) return std::bit_cast<std::uint64_t>(value->asFloat()) == key.bits;
  if (value->isInt()) return static_cast<std::uint64_t>(value->asInt()) == key.bits;
  if (value->isBool()) return (value->asBool() ? 1u : 0u) == key.bits;
  return false;  // tuples are never cached
}

// The cached block when `inputs` repeat its layout: `call.args`/`call.item` get it, `dtypes` and
// `shapes` the outputs'. False (nothing written) on a miss or while another launch holds it.
bool cachedArgs(const CompiledKernel& kernel, std::span<const Value* const> inputs, std::size_t num_outputs,
                PreparedCall& call, DType* dtypes, Shape* shapes) {
  LaunchArgsCache& cache = kernel.args_cache;
  if (cache.busy.exchange(true, std::memory_order_acquire)) return false;
  bool hit = cache.valid && cache.num_inputs == inputs.size();
  for (std::size_t i = 0; hit && i < inputs.size(); ++i) hit = sameKey(cache.inputs[i], inputs[i]);
  if (hit) {
    std::memcpy(&call.args, &cache.args, sizeof(KernelArgs));
    std::copy(std::begin(cache.item), std::end(cache.item), std::begin(call.item));
    for (std::size_t o = 0; o < num_outputs; ++o) {
      dtypes[o] = cache.output_dtypes[o];
      shapes[o] = cache.output_shapes[o];
    }
    ++cache.hits;
  }
  cache.busy.store(false, std::memory_order_release);
  return hit;
}

// Keeps the block prepareCall just laid out for `inputs` (skipped while another launch holds it).
void rememberArgs(const CompiledKernel& kernel, std::span<const Value* const> inputs, const PreparedCall& call) {
  LaunchArgsCache& cache = kernel.args_cache;
  if (cache.busy.exchange(true, std::memory_order_acquire)) return;
  cache.num_inputs = inputs.size();
  bool cacheable = true;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    cache.inputs[i] = inputKey(inputs[i]);
    cacheable = cacheable && (inputs[i] == nullptr || inputs[i]->isTensor() || inputs[i]->isScalar());
  }
  for (std::size_t o = 0; o < call.num_outputs; ++o) {
    cache.output_dtypes[o] = call.outputs[o].dtype();
    cache.output_shapes[o] = call.outputs[o].shape();
  }
  std::memcpy(&cache.args, &call.args, sizeof(KernelArgs));
  std::copy(std::begin(call.item), std::end(call.item), std::begin(cache.item));
  cache.valid = cacheable;
  cache.busy.store(false, std::memory_order_release);
}

}  // namespace

bool PackedOperandCache::admits(const Tensor& operand, bool any_size) const {
  if (operand.storage()->isExternal() ||
      (!any_size && operand.numel() < Tunables::get(Tunable::PackedWeightMinElements)) ||
      Tunables::get(Tunable::PackedWeightEntries) <= 0) {
    return false;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  return unused_in_a_row_ < Tunables::get(Tunable::PackedWeightMaxUnused);
}

Tensor PackedOperandCache::find(const Tensor& operand) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (Entry& entry : entries_) {
    if (!sameView(entry.operand, operand)) continue;
    entry.last_use = ++clock_;
    ++entry.hits;
    ++hits_;
    unused_in_a_row_ = 0;
    return entry.packed;
  }
  return {};
}

void PackedOperandCache::insert(const Tensor& operand, Tensor packed) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++packs_;
  // Another thread may have packed the same tensor meanwhile: keep one entry.
  auto same = std::find_if(entries_.begin(), entries_.end(), [&](const Entry& e) { return sameView(e.operand, operand); });
  if (same != entries_.end()) {
    same->last_use = ++clock_;
    return;
  }
  const auto capacity = static_cast<std::size_t>(std::max<std::int64_t>(1, Tunables::get(Tunable::PackedWeightEntries)));
  while (entries_.size() >= capacity) {
    auto oldest = std::min_element(entries_.begin(), entries_.end(),
                                   [](const Entry& a, const Entry& b) { return a.last_use < b.last_use; });
    if (oldest->hits == 0) ++unused_in_a_row_;
    entries_.erase(oldest);
  }
  entries_.push_back(Entry{operand, std::move(packed), ++clock_, 0});
}

void PackedOperandCache::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (Entry& entry : entries_) {
    if (!spare_.defined() || entry.packed.numel() > spare_.numel()) spare_ = std::move(entry.packed);
  }
  entries_.clear();
}

Tensor PackedOperandCache::takeSpare(std::int64_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  Tensor spare = std::exchange(spare_, Tensor());
  if (!spare.defined() || !spare.isSoleOwner() || spare.numel() * 4 < bytes) return {};
  ++spare_reuses_;
  return spare;
}

PackedOperandCache::Stats PackedOperandCache::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return Stats{packs_, hits_, entries_.size(), unused_in_a_row_ >= Tunables::get(Tunable::PackedWeightMaxUnused),
               spare_reuses_};
}

Status prepareCall(const CompiledKernel& kernel, std::span<const Value* const> inputs, std::span<Value> outputs,
                   PreparedCall& call) {
  const std::size_t num_inputs = inputs.size();
  const std::size_t num_outputs = static_cast<std::size_t>(kernel.num_outputs);
  if (num_inputs + num_outputs > kMaxKernelOperands || outputs.size() < num_outputs) {
    return makeError(ErrorCode::Unsupported, "kernel has too many operands ({} inputs, {} outputs)", num_inputs, num_outputs);
  }
  const Device device = kernel.backend->capabilities().device;
  for (std::size_t i = 0; i < num_inputs; ++i) {
    if (inputs[i] == nullptr || !inputs[i]->isTensor() || inputs[i]->tensor().device() == device) continue;
    return makeError(ErrorCode::Unsupported, "{} kernel {}: input {} ({}) lives on {}, the kernel runs on {}",
                     kernel.backend->capabilities().backend, kernel.handle.symbol, i, inputs[i]->tensor().describe(),
                     inputs[i]->tensor().device().toString(), device.toString());
  }
  call.kernel = &kernel;
  call.num_inputs = num_inputs;
  call.num_outputs = num_outputs;
  DType dtypes[kMaxKernelOperands];
  // A Shape zeroes its dims when made: room for the common few outputs, more on the heap.
  std::array<Shape, 4> few_shapes;
  std::vector<Shape> many_shapes(num_outputs > few_shapes.size() ? num_outputs : 0);
  const std::span<Shape> shapes = num_outputs > few_shapes.size() ? std::span<Shape>(many_shapes)
                                                                  : std::span<Shape>(few_shapes.data(), num_outputs);
  const OpSchema& schema = OpRegistry::global().schema(kernel.spec.op);
  OpContext ctx{&schema, inputs, kernel.spec.attrs, outputs};
  if (kernel.layout_only_args && cachedArgs(kernel, inputs, num_outputs, call, dtypes, shapes.data())) {
    // The inputs' layout repeats the cached launch's: only the pointers and the output rows change
    // (an output is contiguous at its shape, so the family's flat/broadcast choices stand).
    KernelArgs& args = call.args;
    for (std::size_t i = 0; i < num_inputs; ++i) {
      if (inputs[i] != nullptr && inputs[i]->isTensor()) args.data[i] = inputs[i]->tensor().rawData();
    }
    for (std::size_t o = 0; o < num_outputs; ++o) {
      SVM_ASSIGN_OR_RETURN(call.outputs[o], outputBuffer(ctx, static_cast<int>(o), dtypes[o], shapes[o]));
      const Tensor& t = call.outputs[o];
      const std::size_t slot = num_inputs + o;
      args.data[slot] = t.rawData();
      for (int d = 0; d < t.rank(); ++d) {
        args.shape[slot][d] = t.dim(d);
        args.strides[slot][d] = t.stride(d);
      }
    }
    return Status::ok();
  }
  SVM_RETURN_IF_ERROR(kernel.family->plannedOutputs(kernel.spec, kernel.launch_plan.get(), inputs,
                                                    std::span<DType>(dtypes, num_outputs), shapes));
  for (std::size_t o = 0; o < num_outputs; ++o) {
    SVM_ASSIGN_OR_RETURN(call.outputs[o], outputBuffer(ctx, static_cast<int>(o), dtypes[o], shapes[o]));
  }
  KernelArgs& args = call.args;
  std::memset(&args, 0, sizeof(args));
  std::fill(std::begin(call.item), std::end(call.item), std::size_t{0});
  for (std::size_t i = 0; i < num_inputs; ++i) {
    if (inputs[i] == nullptr || !inputs[i]->isTensor()) continue;
    const Tensor& t = inputs[i]->tensor();
    args.data[i] = t.rawData();
    call.item[i] = t.itemSize();
    for (int d = 0; d < t.rank(); ++d) {
      args.shape[i][d] = t.dim(d);
      args.strides[i][d] = t.stride(d);
    }
  }
  for (std::size_t o = 0; o < num_outputs; ++o) {
    const Tensor& t = call.outputs[o];
    const std::size_t slot = num_inputs + o;
    args.data[slot] = t.rawData();
    call.item[slot] = t.itemSize();
    for (int d = 0; d < t.rank(); ++d) {
      args.shape[slot][d] = t.dim(d);
      args.strides[slot][d] = t.stride(d);
    }
  }
  SVM_RETURN_IF_ERROR(kernel.family->plannedPrepare(kernel.spec, kernel.launch_plan.get(), inputs,
                                                    std::span<const Tensor>(call.outputs, num_outputs), args));
  call.packed = packedOperandFor(kernel, inputs, args);  // alive until the call is finished
  if (kernel.layout_only_args && !call.packed.defined()) rememberArgs(kernel, inputs, call);
  return Status::ok();
}

std::int64_t callRows(const PreparedCall& call) {
  return call.kernel->family->rowCount(call.kernel->spec, call.args, call.num_inputs, call.num_outputs);
}

void runCallRows(const PreparedCall& call, std::int64_t begin, std::int64_t end) {
  KernelArgs rows = call.args;
  call.kernel->family->narrowRows(call.kernel->spec, rows, call.item, call.num_inputs, call.num_outputs, begin, end);
  call.kernel->backend->launch(call.kernel->handle, rows);
}

void runCall(const PreparedCall& call) {
  const CompiledKernel& kernel = *call.kernel;
  const bool automatic = kernel.spec.params.threads <= 0 && Tunables::get(Tunable::KernelThreads) == 0;
  const int threads = kernel.spec.params.threads > 0 ? kernel.spec.params.threads : kernelThreads();
  // Row chunks on the host's threads: a CPU backend's kernels only.
  const bool host = kernel.backend->capabilities().device.isCpu();
  const std::int64_t rows = host && threads > 1 && kernel.family->splitsAlongAxis0() ? callRows(call) : -1;
  std::int64_t tasks = std::min<std::int64_t>(threads, rows);
  if (automatic && tasks >= 2) {
    // kernel_threads=auto: work too small to split stays on this thread (each task gets at least
    // kMinAutoElementsPerTask outputs), so no shape is slower than with one thread.
    std::int64_t elements = 0;
    for (std::size_t o = 0; o < call.num_outputs; ++o) elements += call.outputs[o].numel();
    tasks = std::min(tasks, elements / kMinAutoElementsPerTask);
  }
  if (tasks >= 2) {
    // Row chunks of every operand, one task each (the calling thread takes one too).
    ThreadPool::global().run(tasks, [&](int t) { runCallRows(call, rows * t / tasks, rows * (t + 1) / tasks); });
  } else {
    kernel.backend->launch(kernel.handle, call.args);
  }
}

void finishCall(PreparedCall& call, std::span<Value> outputs) {
  if (call.kernel->corrupt_outputs) {
    for (std::size_t o = 0; o < call.num_outputs; ++o) {
      Tensor& t = call.outputs[o];
      if (t.numel() == 0) continue;
      // Flip the sign bit (and more) of the row's first element: a wrong but plausible number.
      const std::int64_t rows = t.rank() == 0 ? 1 : t.dim(0);
      const std::int64_t row =
          call.kernel->corrupt_row < 0 ? rows + call.kernel->corrupt_row : call.kernel->corrupt_row;
      if (row < 0 || row >= rows) continue;
      auto* bytes = static_cast<unsigned char*>(t.rawData()) + row * (t.numel() / rows) * t.itemSize();
      bytes[t.itemSize() - 1] ^= 0xC0;
    }
  }
  for (std::size_t o = 0; o < call.num_outputs; ++o) outputs[o] = Value::fromTensor(std::move(call.outputs[o]));
  call.packed = Tensor();
}

Status invokeCompiled(const CompiledKernel& kernel, std::span<const Value* const> inputs, std::span<Value> outputs) {
  PreparedCall call;
  SVM_RETURN_IF_ERROR(prepareCall(kernel, inputs, outputs, call));
  runCall(call);
  finishCall(call, outputs);
  return Status::ok();
}

bool runCompiledKernel(const void* state, std::span<const Value* const> inputs, std::span<Value> outputs) {
  return invokeCompiled(*static_cast<const CompiledKernel*>(state), inputs, outputs).isOk();
}

Expected<std::unique_ptr<CompiledKernel>> compileKernel(KernelBackend& backend, const KernelFamily& family,
                                                        const KernelSpec& unstamped) {
  if (compileCancelled()) return makeError(ErrorCode::JitError, "{}", kCompileCancelledMessage);
  SVM_RETURN_IF_ERROR(backend.supportsFamily(family));
  KernelSpec spec = backend.targetSpec(unstamped);
  SVM_RETURN_IF_ERROR(family.supports(spec));
  const OpSchema& schema = OpRegistry::global().schema(spec.op);
  SVM_ASSIGN_OR_RETURN(int num_outputs, numOutputs(schema, spec.attrs));
  if (spec.fused) num_outputs = static_cast<int>(spec.fused->outputs.size());
  std::string symbol = "svm_" + family.symbolStem(spec);  // a kept kernel for wider ranges has its own
  std::string key;
  bool from_cache = false;
  SVM_ASSIGN_OR_RETURN(KernelHandle handle, compileThroughCache(backend, family, spec, symbol, key, from_cache));
  auto kernel = std::make_unique<CompiledKernel>();
  kernel->cache_key = std::move(key);
  kernel->from_cache = from_cache;
  kernel->family = &family;
  kernel->spec = spec;
  kernel->launch_plan = family.launchPlan(kernel->spec);
  // The elementwise family's prepare() writes only layout-derived rows and scalar values.
  kernel->layout_only_args = &family == elementwiseFamily(spec.op);
  kernel->backend = &backend;
  kernel->handle = std::move(handle);
  kernel->num_outputs = num_outputs;
  return kernel;
}

}  // namespace shapevm::jit
