// SPDX-License-Identifier: Apache-2.0
// ShapeInferEngine: from a site's ProfileBuffer records, the specialization to compile.
// Policy: the target is the newest signature; records with the same dtypes,
// ranks and layouts form its group. Per input dim over the group: a dim that never changed is
// specialized (static); a varying dim becomes a kernel argument with a guarded range [lo..hi]
// (widened to powers of two when RangeBuckets is on, so a few kernels cover a wide range); after
// MaxRecompiles compiles at the site every dim goes fully symbolic (no range). Divisibility seen
// in every observed value is reported, not guarded (O1 kernels do not exploit it).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "bytecode/shape_token.h"
#include "jit/kernel_abi.h"
#include "jit/reasons.h"
#include "vm/dispatch_slot.h"
#include "vm/profile.h"

namespace shapevm::jit {

struct ShapeInference {
  KernelSpec spec;
  std::vector<Shape> observed;  // the target record's input shapes (validation starts there)
  std::string policy;           // "specialized" / "range" / "symbolic (recompile cap 8 reached)"
  std::int64_t divisibility = 1; // largest power of two (<= 64) dividing every observed varying dim
};

// The most recently seen record (the signature a compile targets), or nullptr when empty.
const ProfileRecord* newestRecord(std::span<const ProfileRecord> records);
// Same group: every input has the same kind, dtype, rank and layout class. A kernel's dim ranges
// span the records of the newest record's group only.
bool sameGroup(const ProfileRecord& a, const ProfileRecord& b);

// `compiles` = kernels compiled at this site so far (for the recompile cap).
Expected<ShapeInference> inferSpec(OpId op, std::span<const AttrValue> attrs, std::span<const ProfileRecord> records,
                                   int compiles);

// The guard that admits exactly what `spec` was compiled for.
Guard guardFor(const KernelSpec& spec);
// True when every input `inner` admits is also admitted by `outer`.
bool guardCovers(const Guard& outer, const Guard& inner);
// Why `record` fails `guard`, or "" when it passes.
std::string guardMissReason(const Guard& guard, const ProfileRecord& record, JitReason* reason);

// The site's input token rewritten to show what the kernel believes: each dynamic dim of
// `token` gets the spec's range (lo..hi), a static specialization shows as lo == hi.
TensorDescriptor rewriteToken(const TensorDescriptor& token, const OperandSpec& spec);

}  // namespace shapevm::jit
