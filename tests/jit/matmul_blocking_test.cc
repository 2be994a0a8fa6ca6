// SPDX-License-Identifier: Apache-2.0
// The matmul's blocking per host (matmul_plan.h's cache model): the default K block and every
// search-space candidate's blocks derive from the target's caches (KernelTarget, stamped from the
// backend's CostHints). Checked on synthetic targets: the Zen 5 figures the defaults were tuned
// on come out of the model, bigger caches give bigger blocks, each candidate's blocks fit the
// caches they were sized for, unknown caches use the fallbacks, and an AVX2 target never gets a
// 16-lane-register tile (and the backend's own target carries the host's caches).
#include <gtest/gtest.h>

#include <random>

#include "jit/llvm_cpu/matmul_plan.h"
#include "jit_test_util.h"
#include "support/cpu_caches.h"

namespace shapevm::jit {
namespace {

using namespace testing;  // jit_test_util.h

constexpr std::int64_t kKiB = 1024, kMiB = 1024 * 1024;

KernelTarget avx512(std::int64_t l1, std::int64_t l2, std::int64_t l3) {
  return {512, 32, false, l1, l2, l3};
}
KernelTarget avx2(std::int64_t l1, std::int64_t l2, std::int64_t l3) {
  return {256, 16, false, l1, l2, l3};
}

// The spec of a float32 [m, k] @ [k, n] (built from 1 x 1 operands: no data is drawn).
KernelSpec matmulSpec(std::int64_t m, std::int64_t k, std::int64_t n, const KernelTarget& target) {
  std::mt19937 rng(1);
  KernelSpec spec =
      specFor("matmul", {operand(DType::Float32, Shape{1, 1}, rng), operand(DType::Float32, Shape{1, 1}, rng)});
  spec.inputs[0].dims[0].size = m;
  spec.inputs[0].dims[1].size = k;
  spec.inputs[1].dims[0].size = k;
  spec.inputs[1].dims[1].size = n;
  spec.target = target;
  return spec;
}

TEST(MatmulBlocking, DefaultKBlockFollowsTheCaches) {
  // Zen 5 (48 KiB L1d, 1 MiB L2): the figures the AVX-512 defaults were tuned with.
  const KernelTarget zen5 = avx512(48 * kKiB, 1 * kMiB, 4 * kMiB);
  EXPECT_EQ(matmul::resolvePlan(matmulSpec(512, 512, 512, zen5)).kc, 256);
  EXPECT_EQ(matmul::resolvePlan(matmulSpec(32, 768, 4096, zen5)).kc, 128);
  // A 2 MiB L2 (Sapphire Rapids) holds panels twice as deep; a 32 KiB L1d half as deep.
  EXPECT_EQ(matmul::resolvePlan(matmulSpec(512, 512, 512, avx512(48 * kKiB, 2 * kMiB, 2 * kMiB))).kc, 512);
  EXPECT_EQ(matmul::resolvePlan(matmulSpec(32, 768, 4096, avx512(32 * kKiB, 1 * kMiB, 4 * kMiB))).kc, 64);
  // AVX2 with a 32 KiB L1d (Zen 3, Haswell): 4 x 16 tiles, K blocks of 256 as before.
  const matmul::Plan zen3 = matmul::resolvePlan(matmulSpec(512, 512, 512, avx2(32 * kKiB, 512 * kKiB, 16 * kMiB)));
  EXPECT_EQ(zen3.mr, 4);
  EXPECT_EQ(zen3.nr(), 16);
  EXPECT_EQ(zen3.kc, 256);
  EXPECT_EQ(matmul::resolvePlan(matmulSpec(512, 512, 512, avx2(48 * kKiB, 512 * kKiB, 16 * kMiB))).kc, 512);
  // Unknown caches: the fallbacks.
  const matmul::CacheModel fallback = matmul::cacheModel(avx2(0, 0, 0));
  EXPECT_EQ(fallback.l1, kFallbackL1dBytes);
  EXPECT_EQ(fallback.l2, kFallbackL2Bytes);
  EXPECT_EQ(fallback.l3, kFallbackL3Bytes);
  EXPECT_EQ(matmul::resolvePlan(matmulSpec(512, 512, 512, avx2(0, 0, 0))).kc, matmul::kcForL1(fallback, 4, 16));
  // Explicit parameters still win over the model.
  KernelSpec explicit_kc = matmulSpec(512, 512, 512, zen5);
  explicit_kc.params.kc = 96;
  EXPECT_EQ(matmul::resolvePlan(explicit_kc).kc, 96);
}

TEST(MatmulBlocking, CandidatesFitTheCachesTheyWereSizedFor) {
  const KernelFamily* family = matmulFamily(OpId::MatMul);
  for (const KernelTarget& target : {avx512(48 * kKiB, 1 * kMiB, 4 * kMiB), avx512(48 * kKiB, 2 * kMiB, 2 * kMiB),
                                     avx2(32 * kKiB, 512 * kKiB, 16 * kMiB), avx2(64 * kKiB, 4 * kMiB, 8 * kMiB)}) {
    const matmul::CacheModel caches = matmul::cacheModel(target);
    std::vector<int> kcs;
    for (auto [m, k, n] : {std::tuple<std::int64_t, std::int64_t, std::int64_t>{512, 1024, 1024}, {16, 512, 1024}}) {
      const std::vector<KernelParams> space = family->searchSpace(matmulSpec(m, k, n, target));
      ASSERT_GT(space.size(), 4u);
      for (const KernelParams& p : space) {
        // B read in place (K blocks of 8/16 rows) and oneDNN's primitive have no blocks of ours.
        if (p.isDefault() || p.nc < 0 || p.library != 0) continue;
        const std::string where = p.toString() + " on L1d " + std::to_string(caches.l1) + " L2 " +
                                  std::to_string(caches.l2) + " L3 " + std::to_string(caches.l3);
        EXPECT_GE(p.kc, matmul::kMinModelKc) << where;
        kcs.push_back(p.kc);
        if (p.mc > 0) {
          // Packed A and B blocks: A in half of L2 at most, B in half of the L3 share (or one panel).
          EXPECT_LE(std::int64_t{p.mc} * p.kc * 4, caches.l2 / 2) << where;
          EXPECT_TRUE(std::int64_t{p.kc} * p.nc * 4 <= caches.l3 / 2 || p.nc == p.nr) << where;
          EXPECT_EQ(p.mc % p.mr, 0) << where;
          EXPECT_EQ(p.nc % p.nr, 0) << where;
        } else if (p.prefetch < 0 && p.kc == matmul::kcForL1(caches, p.mr, p.nr)) {
          EXPECT_TRUE((p.mr + p.nr) * p.kc * 4 <= caches.l1 || p.kc == matmul::kMinModelKc) << where;
        } else if (p.prefetch > 0 && p.kc == matmul::kcForL2(caches, p.nr)) {
          EXPECT_TRUE(2 * p.nr * p.kc * 4 <= caches.l2 / 8 || p.kc == matmul::kMinModelKc) << where;
        }
        // No 16-lane-register tile on AVX2: every tile's accumulators fit 16 ymm minus 4.
        EXPECT_LE(p.mr * p.nr / target.floatLanes(), target.vector_registers - 4) << where;
        if (target.vector_bits == 256) {
          EXPECT_LE(p.nr, 32) << where;
        }
      }
    }
    // Not one fixed K block: the model's L1 and L2 sizes both appear.
    std::sort(kcs.begin(), kcs.end());
    EXPECT_GT(std::unique(kcs.begin(), kcs.end()) - kcs.begin(), 1);
  }
  // Bigger caches, deeper blocks: the AVX2 space on 64 KiB / 4 MiB has deeper K blocks in all
  // than the 32 KiB / 512 KiB one, and bigger packed A blocks.
  auto sumsOf = [&](const KernelTarget& target) {
    std::pair<std::int64_t, std::int64_t> sums{0, 0};
    for (const KernelParams& p : family->searchSpace(matmulSpec(512, 1024, 1024, target))) {
      sums.first += p.kc;
      sums.second += p.mc;
    }
    return sums;
  };
  const auto small = sumsOf(avx2(32 * kKiB, 512 * kKiB, 16 * kMiB));
  const auto large = sumsOf(avx2(64 * kKiB, 4 * kMiB, 8 * kMiB));
  EXPECT_GT(large.first, small.first);
  EXPECT_GT(large.second, small.second);
}

TEST(MatmulBlocking, TheBackendsTargetCarriesTheHostCaches) {
  const KernelTarget& isa = sharedBackend().capabilities().isa;
  const CpuCaches& host = hostCpuCaches();
  EXPECT_EQ(isa.l1d_bytes, host.l1d_bytes) << host.toString();
  EXPECT_EQ(isa.l2_bytes, host.l2_bytes);
  EXPECT_EQ(isa.l3_bytes, host.l3PerCpu());
  // The default plan of a stamped spec is the model's on those caches.
  const KernelSpec spec = sharedBackend().targetSpec(matmulSpec(512, 512, 512, {}));
  const matmul::CacheModel caches = matmul::cacheModel(isa);
  const int want = isa.vector_bits >= 512 ? matmul::kcForL2(caches, 64) : matmul::kcForL1(caches, 4, 16);
  EXPECT_EQ(matmul::resolvePlan(spec).kc, want);
}

}  // namespace
}  // namespace shapevm::jit
