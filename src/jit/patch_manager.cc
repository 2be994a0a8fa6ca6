// SPDX-License-Identifier: Apache-2.0
// The one patch point (see patch_manager.h).
#include "jit/patch_manager.h"

#include "jit/shape_infer.h"

namespace shapevm::jit {

RuntimePatchManager::~RuntimePatchManager() {
  uninstallAll();
  std::lock_guard<std::mutex> lock(mutex_);
  // The VM is not running (documented precondition), so everything retired is unreachable.
  for (Retired& retired : retired_) {
    for (auto& kernel : retired.kernels) (void)engine_.remove(kernel->handle);
  }
  retired_.clear();
}

int RuntimePatchManager::install(int function, int site, Guard guard, std::unique_ptr<CompiledKernel> kernel) {
  std::lock_guard<std::mutex> lock(mutex_);
  SiteKernels& current = sites_[{function, site}];
  auto table = std::make_unique<PatchTable>();
  std::vector<std::unique_ptr<CompiledKernel>> kept;
  std::vector<std::unique_ptr<CompiledKernel>> dropped;
  table->entries.push_back(CompiledEntry{guard, &runCompiledKernel, kernel.get(), kernel->handle.id});
  kept.push_back(std::move(kernel));
  if (current.table) {
    for (std::size_t e = 0; e < current.table->entries.size(); ++e) {
      const CompiledEntry& entry = current.table->entries[e];
      if (guardCovers(guard, entry.guard)) {
        dropped.push_back(std::move(current.kernels[e]));
      } else {
        table->entries.push_back(entry);
        kept.push_back(std::move(current.kernels[e]));
      }
    }
  }
  const int count = static_cast<int>(table->entries.size());
  DispatchSlot& slot = vm_.runtime(function).slots[static_cast<std::size_t>(site)];
  slot.patched.store(table.get(), std::memory_order_seq_cst);
  std::unique_ptr<PatchTable> old = std::move(current.table);
  current.table = std::move(table);
  current.kernels = std::move(kept);
  if (old || !dropped.empty()) retire(std::move(old), std::move(dropped));
  reclaimLocked();
  return count;
}

void RuntimePatchManager::retire(std::unique_ptr<PatchTable> table, std::vector<std::unique_ptr<CompiledKernel>> kernels) {
  // Read after the new table's seq_cst store: a run that could still see `table` had bumped the
  // epoch to this odd value (or an earlier one) before loading it.
  retired_.push_back(Retired{vm_.runEpoch(), std::move(table), std::move(kernels)});
}

void RuntimePatchManager::reclaim() {
  std::lock_guard<std::mutex> lock(mutex_);
  reclaimLocked();
}

void RuntimePatchManager::reclaimLocked() {
  const std::uint64_t now = vm_.runEpoch();
  std::vector<Retired> pending;
  for (Retired& retired : retired_) {
    const bool safe = (retired.epoch % 2 == 0) || now != retired.epoch;
    if (!safe) {
      pending.push_back(std::move(retired));
      continue;
    }
    for (auto& kernel : retired.kernels) (void)engine_.remove(kernel->handle);
  }
  retired_ = std::move(pending);
}

void RuntimePatchManager::uninstallAll() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [key, current] : sites_) {
    vm_.runtime(key.first).slots[static_cast<std::size_t>(key.second)].patched.store(nullptr, std::memory_order_seq_cst);
    if (current.table) retire(std::move(current.table), std::move(current.kernels));
  }
  sites_.clear();
  reclaimLocked();
}

std::size_t RuntimePatchManager::entries(int function, int site) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = sites_.find({function, site});
  return it == sites_.end() || !it->second.table ? 0 : it->second.table->entries.size();
}

std::size_t RuntimePatchManager::retiredPending() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return retired_.size();
}

std::vector<Guard> RuntimePatchManager::guards(int function, int site) const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<Guard> out;
  auto it = sites_.find({function, site});
  if (it != sites_.end() && it->second.table) {
    for (const CompiledEntry& entry : it->second.table->entries) out.push_back(entry.guard);
  }
  return out;
}

}  // namespace shapevm::jit
