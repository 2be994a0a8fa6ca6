// SPDX-License-Identifier: Apache-2.0
// A compiled op kernel as the VM's dispatch slot sees it: the `state` behind a CompiledEntry.
// runCompiledKernel() is the CompiledKernelFn: it asks the family for the output shapes, takes
// output buffers (reusing the site's previous outputs when uniquely owned), fills KernelArgs and
// calls the generated code. It declines (returns false) instead of failing, so the slot runs the
// reference kernel — which then reports any real error with its usual message.
#pragma once

#include <atomic>
#include <cstdint>
#include <span>

#include "jit/engine.h"
#include "jit/kernel_abi.h"

namespace shapevm::jit {

struct CompiledKernel {
  const KernelFamily* family = nullptr;
  KernelSpec spec;
  GeneratedKernelFn fn = nullptr;
  KernelHandle handle;
  int num_outputs = 1;
  // Test-only fault injection: when set, the kernel's first output element is corrupted after
  // every call, so validation must catch it.
  bool corrupt_outputs = false;
};

// Runs `kernel` on `inputs`; `outputs` may hold previous outputs for reuse. Error when the family
// rejects the inputs (they do not fit its spec) or an allocation fails.
Status invokeCompiled(const CompiledKernel& kernel, std::span<const Value* const> inputs, std::span<Value> outputs);

// The CompiledKernelFn installed in dispatch slots (state = const CompiledKernel*).
bool runCompiledKernel(const void* state, std::span<const Value* const> inputs, std::span<Value> outputs);

// Compiles `spec` with `family` into a CompiledKernel (not yet validated or installed).
Expected<std::unique_ptr<CompiledKernel>> compileKernel(JitEngine& engine, const KernelFamily& family,
                                                        const KernelSpec& spec);

}  // namespace shapevm::jit
