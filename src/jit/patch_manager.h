// SPDX-License-Identifier: Apache-2.0
// RuntimePatchManager: THE single place that changes dispatch. It owns every installed kernel,
// publishes each site's immutable PatchTable with one atomic store (readers never lock), keeps
// several entries per site (polymorphic: newest first; an entry whose guard the new kernel's
// guard covers is dropped), and retires replaced tables and kernels only when no frame can still
// be running them: a table unpublished at VM run epoch E is freed once the epoch has moved past E
// (or immediately when E is even, i.e. no run was in progress). See LuaJIT's lj_dispatch_update
// and ORC's ReOptimizeLayer for the same rule.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "jit/backend.h"
#include "jit/compiled_kernel.h"
#include "jit/region.h"
#include "vm/vm.h"

namespace shapevm::jit {

// A guard as text: per input `f32[1..64,128]` (dims lo..hi, `%d` divisor), `int` for scalars.
std::string guardText(const Guard& guard);

class RuntimePatchManager {
 public:
  RuntimePatchManager(VirtualMachine& vm, KernelBackend& engine) : vm_(vm), engine_(engine) {}
  // Unpublishes every table and frees all kernels. The VM must not be running.
  ~RuntimePatchManager();

  // Installs a validated kernel at (function, site) behind `guard`; returns the entry count of
  // the site's new table.
  int install(int function, int site, Guard guard, std::unique_ptr<CompiledKernel> kernel);
  // Installs a validated fused region at the slot of its first CallOp; region entries come first
  // in the table (newest first, at most kMaxRegionEntries; a region for the same PC range is
  // replaced) and the op's own entries stay behind them as the fallback. Returns the site's
  // region entry count.
  int installRegion(int function, int site, std::unique_ptr<CompiledRegion> region);
  static constexpr std::size_t kMaxRegionEntries = 4;
  // Frees retired tables/kernels that no frame can still be running.
  void reclaim();
  // Unpublishes all tables of every site (used before detaching). Kernels are retired normally.
  void uninstallAll();

  std::size_t entries(int function, int site) const;  // the op's own entries (fused regions not counted)
  std::size_t retiredPending() const;
  // The guards of the site's current entries (for guard-miss explanations).
  std::vector<Guard> guards(int function, int site) const;
  // What is installed at a site, in table order (regions first), for `dump` and the debugger.
  struct EntryInfo {
    bool region = false;
    std::string symbol;             // the kernel's symbol; a region: its kernels' symbols, comma-separated
    std::string guard;              // guardText(); a region: the PC range it covers
    std::string description;        // a region's fused steps ("" for an op entry)
    std::uint64_t launches = 0;     // region: executions it served; op entry: see launches_of_site
    bool launches_of_site = false;  // op entries: `launches` is the site's compiled launches (not per entry)
  };
  std::vector<EntryInfo> describe(int function, int site) const;

 private:
  struct SiteKernels {
    std::unique_ptr<PatchTable> table;                     // the published one
    std::vector<std::unique_ptr<CompiledRegion>> regions;  // parallel to the table's region entries (first)
    std::vector<std::unique_ptr<CompiledKernel>> kernels;  // parallel to the op entries after them
  };
  struct Retired {
    std::uint64_t epoch = 0;
    std::unique_ptr<PatchTable> table;
    std::vector<std::unique_ptr<CompiledKernel>> kernels;
    std::vector<std::unique_ptr<CompiledRegion>> regions;
  };
  void publish(int function, int site, SiteKernels& current, std::unique_ptr<PatchTable> table,
               std::vector<std::unique_ptr<CompiledRegion>> regions, std::vector<std::unique_ptr<CompiledKernel>> kernels,
               std::vector<std::unique_ptr<CompiledKernel>> dropped_kernels,
               std::vector<std::unique_ptr<CompiledRegion>> dropped_regions);
  void release(Retired& retired);
  void reclaimLocked();

  VirtualMachine& vm_;
  KernelBackend& engine_;
  mutable std::mutex mutex_;
  std::map<std::pair<int, int>, SiteKernels> sites_;
  std::vector<Retired> retired_;
  std::atomic<bool> any_retired_{false};  // !retired_.empty(), read by reclaim() without the lock
};

}  // namespace shapevm::jit
