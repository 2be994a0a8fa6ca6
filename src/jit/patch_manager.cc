// SPDX-License-Identifier: Apache-2.0
// The one patch point (see patch_manager.h).
#include "jit/patch_manager.h"

#include "jit/shape_infer.h"

namespace shapevm::jit {

RuntimePatchManager::~RuntimePatchManager() {
  uninstallAll();
  std::lock_guard<std::mutex> lock(mutex_);
  // The VM is not running (documented precondition), so everything retired is unreachable.
  for (Retired& retired : retired_) release(retired);
  retired_.clear();
}

void RuntimePatchManager::release(Retired& retired) {
  for (auto& kernel : retired.kernels) (void)engine_.free(kernel->handle);
  for (auto& region : retired.regions) {
    for (KernelHandle* handle : region->handles()) (void)engine_.free(*handle);
  }
}

int RuntimePatchManager::install(int function, int site, Guard guard, std::unique_ptr<CompiledKernel> kernel) {
  std::lock_guard<std::mutex> lock(mutex_);
  SiteKernels& current = sites_[{function, site}];
  auto table = std::make_unique<PatchTable>();
  std::vector<std::unique_ptr<CompiledKernel>> kept;
  std::vector<std::unique_ptr<CompiledKernel>> dropped;
  const std::size_t regions = current.regions.size();
  for (std::size_t e = 0; e < regions; ++e) table->entries.push_back(current.table->entries[e]);
  table->has_region = regions > 0;
  table->entries.push_back(CompiledEntry{guard, &runCompiledKernel, kernel.get(), kernel->handle.id});
  kept.push_back(std::move(kernel));
  if (current.table) {
    for (std::size_t e = regions; e < current.table->entries.size(); ++e) {
      const CompiledEntry& entry = current.table->entries[e];
      if (guardCovers(guard, entry.guard)) {
        dropped.push_back(std::move(current.kernels[e - regions]));
      } else {
        table->entries.push_back(entry);
        kept.push_back(std::move(current.kernels[e - regions]));
      }
    }
  }
  const int count = static_cast<int>(table->entries.size() - regions);
  publish(function, site, current, std::move(table), std::move(current.regions), std::move(kept), std::move(dropped), {});
  return count;
}

int RuntimePatchManager::installRegion(int function, int site, std::unique_ptr<CompiledRegion> region) {
  std::lock_guard<std::mutex> lock(mutex_);
  SiteKernels& current = sites_[{function, site}];
  auto table = std::make_unique<PatchTable>();
  table->has_region = true;
  CompiledEntry entry;
  entry.state = region.get();
  entry.region = &runCompiledRegion;
  entry.resume_pc = region->range.resume_pc;
  table->entries.push_back(entry);
  std::vector<std::unique_ptr<CompiledRegion>> regions;
  std::vector<std::unique_ptr<CompiledRegion>> dropped;
  regions.push_back(std::move(region));
  const FusionRange& range = regions[0]->range;
  for (std::size_t e = 0; e < current.regions.size(); ++e) {
    const FusionRange& other = current.regions[e]->range;
    const bool same_range = other.start_pc == range.start_pc && other.resume_pc == range.resume_pc;
    if (!same_range && regions.size() < kMaxRegionEntries) {
      table->entries.push_back(current.table->entries[e]);
      regions.push_back(std::move(current.regions[e]));
    } else {
      dropped.push_back(std::move(current.regions[e]));
    }
  }
  if (current.table) {
    for (std::size_t e = current.regions.size(); e < current.table->entries.size(); ++e) table->entries.push_back(current.table->entries[e]);
  }
  const int count = static_cast<int>(regions.size());
  publish(function, site, current, std::move(table), std::move(regions), std::move(current.kernels), {}, std::move(dropped));
  return count;
}

void RuntimePatchManager::publish(int function, int site, SiteKernels& current, std::unique_ptr<PatchTable> table,
                                  std::vector<std::unique_ptr<CompiledRegion>> regions,
                                  std::vector<std::unique_ptr<CompiledKernel>> kernels,
                                  std::vector<std::unique_ptr<CompiledKernel>> dropped_kernels,
                                  std::vector<std::unique_ptr<CompiledRegion>> dropped_regions) {
  DispatchSlot& slot = vm_.runtime(function).slots[static_cast<std::size_t>(site)];
  slot.patched.store(table.get(), std::memory_order_seq_cst);
  std::unique_ptr<PatchTable> old = std::move(current.table);
  current.table = std::move(table);
  current.regions = std::move(regions);
  current.kernels = std::move(kernels);
  // Read after the new table's seq_cst store: a run that could still see `old` had bumped the
  // epoch to this odd value (or an earlier one) before loading it.
  if (old || !dropped_kernels.empty() || !dropped_regions.empty()) {
    retired_.push_back(Retired{vm_.runEpoch(), std::move(old), std::move(dropped_kernels), std::move(dropped_regions)});
    any_retired_.store(true, std::memory_order_release);
  }
  reclaimLocked();
}

void RuntimePatchManager::reclaim() {
  // Most runs retire nothing: no lock then. A table retired after this load waits for the next call.
  if (!any_retired_.load(std::memory_order_acquire)) return;
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
    release(retired);
  }
  retired_ = std::move(pending);
  any_retired_.store(!retired_.empty(), std::memory_order_release);
}

void RuntimePatchManager::uninstallAll() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [key, current] : sites_) {
    vm_.runtime(key.first).slots[static_cast<std::size_t>(key.second)].patched.store(nullptr, std::memory_order_seq_cst);
    if (current.table) {
      retired_.push_back(Retired{vm_.runEpoch(), std::move(current.table), std::move(current.kernels), std::move(current.regions)});
    }
  }
  sites_.clear();
  reclaimLocked();
}

std::size_t RuntimePatchManager::entries(int function, int site) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = sites_.find({function, site});
  return it == sites_.end() || !it->second.table ? 0 : it->second.table->entries.size() - it->second.regions.size();
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
    for (const CompiledEntry& entry : it->second.table->entries) {
      if (entry.region == nullptr) out.push_back(entry.guard);
    }
  }
  return out;
}

std::string guardText(const Guard& guard) {
  std::string text;
  for (const InputGuard& input : guard.inputs) {
    if (!text.empty()) text += " x ";
    if (!input.is_tensor) {
      text += input.scalar_kind == ValueKind::None ? "_" : std::string(valueKindName(input.scalar_kind));
      continue;
    }
    text += std::string(dtypeShortName(input.dtype)) + "[";
    for (int d = 0; d < input.rank && d < kMaxRank; ++d) {
      const DimRange& dim = input.dims[d];
      text += d ? "," : "";
      if (dim.lo == dim.hi) text += std::to_string(dim.lo);
      else text += std::to_string(dim.lo) + ".." + (!dim.bounded() ? std::string() : std::to_string(dim.hi));
      if (dim.divisor > 1) text += "%" + std::to_string(dim.divisor);
    }
    text += input.require_contiguous ? "]" : "] strided";
  }
  return text;
}

std::vector<RuntimePatchManager::EntryInfo> RuntimePatchManager::describe(int function, int site) const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<EntryInfo> out;
  auto it = sites_.find({function, site});
  if (it == sites_.end() || !it->second.table) return out;
  const SiteKernels& current = it->second;
  std::uint64_t region_launches = 0;
  for (const auto& region : current.regions) {
    EntryInfo info;
    info.region = true;
    for (const KernelHandle* handle : region->handles())
      info.symbol += (info.symbol.empty() ? "" : ",") + handle->symbol;
    info.guard = fmt::format("PC 0x{:04X}..0x{:04X}", region->range.start_pc, region->range.resume_pc - 1);
    info.description = region->describe();
    info.launches = region->run_counter->load(std::memory_order_relaxed);
    region_launches += info.launches;
    out.push_back(std::move(info));
  }
  const std::uint64_t compiled =
      vm_.runtime(function).slots[static_cast<std::size_t>(site)].compiled_calls.load(std::memory_order_relaxed);
  const std::uint64_t op_launches = compiled > region_launches ? compiled - region_launches : 0;
  for (std::size_t e = 0; e < current.kernels.size(); ++e) {
    EntryInfo info;
    info.symbol = current.kernels[e]->handle.symbol;
    info.guard = guardText(current.table->entries[current.regions.size() + e].guard);
    info.launches = op_launches;
    info.launches_of_site = current.kernels.size() > 1;
    out.push_back(std::move(info));
  }
  return out;
}

}  // namespace shapevm::jit
