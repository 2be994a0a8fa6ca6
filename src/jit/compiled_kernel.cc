// SPDX-License-Identifier: Apache-2.0
// Calling generated kernels: output allocation, the KernelArgs block, packed operands (cached
// per kernel), fault injection.
#include "jit/compiled_kernel.h"

#include "jit/fusion.h"
#include "support/thread_pool.h"
#include "support/tunables.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace shapevm::jit {

namespace {

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
  if (value == nullptr || !value->isTensor() || !kernel.packed.admits(value->tensor())) return {};
  const Tensor& source = value->tensor();
  Tensor packed = kernel.packed.find(source);
  if (!packed.defined()) {
    auto buffer = Tensor::empty(DType::Float32, Shape{(operand.bytes + 3) / 4});
    if (!buffer) return {};  // e.g. beyond MaxTensorBytes: the kernel packs as it goes
    packed = std::move(*buffer);
    KernelArgs pack = args;
    kernel.family->usePacked(kernel.spec, pack, packed.rawData(), PackMode::PackOnly);
    kernel.fn(&pack);
    kernel.packed.insert(source, packed);
  }
  kernel.family->usePacked(kernel.spec, args, packed.rawData(), PackMode::Read);
  return packed;
}

}  // namespace

bool PackedOperandCache::admits(const Tensor& operand) const {
  if (operand.storage()->isExternal() || operand.numel() < Tunables::get(Tunable::PackedWeightMinElements) ||
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
  entries_.clear();
}

PackedOperandCache::Stats PackedOperandCache::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return Stats{packs_, hits_, entries_.size(), unused_in_a_row_ >= Tunables::get(Tunable::PackedWeightMaxUnused)};
}

Status invokeCompiled(const CompiledKernel& kernel, std::span<const Value* const> inputs, std::span<Value> outputs) {
  const std::size_t num_inputs = inputs.size();
  const std::size_t num_outputs = static_cast<std::size_t>(kernel.num_outputs);
  if (num_inputs + num_outputs > kMaxKernelOperands || outputs.size() < num_outputs) {
    return makeError(ErrorCode::Unsupported, "kernel has too many operands ({} inputs, {} outputs)", num_inputs, num_outputs);
  }
  DType dtypes[kMaxKernelOperands];
  Shape shapes[kMaxKernelOperands];
  SVM_RETURN_IF_ERROR(kernel.family->outputs(kernel.spec, inputs, std::span<DType>(dtypes, num_outputs),
                                             std::span<Shape>(shapes, num_outputs)));
  const OpSchema& schema = OpRegistry::global().schema(kernel.spec.op);
  OpContext ctx{&schema, inputs, kernel.spec.attrs, outputs};
  Tensor fresh[kMaxKernelOperands];
  for (std::size_t o = 0; o < num_outputs; ++o) {
    SVM_ASSIGN_OR_RETURN(fresh[o], outputBuffer(ctx, static_cast<int>(o), dtypes[o], shapes[o]));
  }
  KernelArgs args;
  std::memset(&args, 0, sizeof(args));
  for (std::size_t i = 0; i < num_inputs; ++i) {
    if (inputs[i] == nullptr || !inputs[i]->isTensor()) continue;
    const Tensor& t = inputs[i]->tensor();
    args.data[i] = t.rawData();
    for (int d = 0; d < t.rank(); ++d) {
      args.shape[i][d] = t.dim(d);
      args.strides[i][d] = t.stride(d);
    }
  }
  for (std::size_t o = 0; o < num_outputs; ++o) {
    const Tensor& t = fresh[o];
    const std::size_t slot = num_inputs + o;
    args.data[slot] = t.rawData();
    for (int d = 0; d < t.rank(); ++d) {
      args.shape[slot][d] = t.dim(d);
      args.strides[slot][d] = t.stride(d);
    }
  }
  SVM_RETURN_IF_ERROR(kernel.family->prepare(kernel.spec, inputs, std::span<const Tensor>(fresh, num_outputs), args));
  const Tensor packed = packedOperandFor(kernel, inputs, args);  // alive until the kernel returns
  const int threads = kernel.spec.params.threads > 0 ? kernel.spec.params.threads
                                                     : static_cast<int>(Tunables::get(Tunable::KernelThreads));
  const std::int64_t rows = num_outputs > 0 && fresh[0].rank() >= 1 ? fresh[0].dim(0) : 0;
  if (threads > 1 && rows >= 2 && kernel.family->splitsAlongAxis0()) {
    // Row chunks of every operand, one task each (the calling thread takes one too).
    std::size_t item[kMaxKernelOperands] = {};
    for (std::size_t i = 0; i < num_inputs; ++i) {
      if (inputs[i] != nullptr && inputs[i]->isTensor()) item[i] = inputs[i]->tensor().itemSize();
    }
    for (std::size_t o = 0; o < num_outputs; ++o) item[num_inputs + o] = fresh[o].itemSize();
    const int tasks = static_cast<int>(std::min<std::int64_t>(threads, rows));
    ThreadPool::global().run(tasks, [&](int t) {
      const std::int64_t begin = rows * t / tasks;
      const std::int64_t end = rows * (t + 1) / tasks;
      KernelArgs chunk = args;
      for (std::size_t k = 0; k < num_inputs + num_outputs; ++k) {
        if (chunk.data[k] == nullptr) continue;
        chunk.data[k] = static_cast<char*>(args.data[k]) + begin * args.strides[k][0] * static_cast<std::int64_t>(item[k]);
        chunk.shape[k][0] = end - begin;
      }
      kernel.fn(&chunk);
    });
  } else {
    kernel.fn(&args);
  }
  if (kernel.corrupt_outputs) {
    for (std::size_t o = 0; o < num_outputs; ++o) {
      Tensor& t = fresh[o];
      if (t.numel() == 0) continue;
      // Flip the sign bit (and more) of the first element's bytes: a wrong but plausible number.
      auto* bytes = static_cast<unsigned char*>(t.rawData());
      bytes[t.itemSize() - 1] ^= 0xC0;
    }
  }
  for (std::size_t o = 0; o < num_outputs; ++o) outputs[o] = Value::fromTensor(std::move(fresh[o]));
  return Status::ok();
}

bool runCompiledKernel(const void* state, std::span<const Value* const> inputs, std::span<Value> outputs) {
  return invokeCompiled(*static_cast<const CompiledKernel*>(state), inputs, outputs).isOk();
}

Expected<std::unique_ptr<CompiledKernel>> compileKernel(JitEngine& engine, const KernelFamily& family,
                                                        const KernelSpec& spec) {
  SVM_RETURN_IF_ERROR(family.supports(spec));
  const OpSchema& schema = OpRegistry::global().schema(spec.op);
  SVM_ASSIGN_OR_RETURN(int num_outputs, numOutputs(schema, spec.attrs));
  if (spec.fused) num_outputs = static_cast<int>(spec.fused->outputs.size());
  const std::string symbol = "svm_" + family.symbolStem(spec);
  SVM_ASSIGN_OR_RETURN(KernelHandle handle,
                       engine.compile(symbol, [&](llvm::Module& module) { return family.emit(spec, module, symbol); }));
  auto kernel = std::make_unique<CompiledKernel>();
  kernel->family = &family;
  kernel->spec = spec;
  kernel->fn = reinterpret_cast<GeneratedKernelFn>(handle.address);
  kernel->handle = std::move(handle);
  kernel->num_outputs = num_outputs;
  return kernel;
}

}  // namespace shapevm::jit
