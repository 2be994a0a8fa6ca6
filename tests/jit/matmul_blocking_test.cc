// SPDX-License-Identifier: Apache-2.0
// The matmul's blocking per host (matmul_plan.h's cache model): the default K block and every
// search-space candidate's blocks derive from the target's caches (KernelTarget, stamped from the
// backend's CostHints). Checked on synthetic targets: the Zen 5 figures the defaults were tuned
// on come out of the model, bigger caches give bigger blocks, each candidate's blocks fit the
// caches they were sized for, unknown caches use the fallbacks, and an AVX2 target never gets a
// 16-lane-register tile (and the backend's own target carries the host's caches). Where A's rows
// would not stay in L2 between panels the default packs A and B blocks, and computes the same.
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
  // AVX2 with a 32 KiB L1d (Zen 3, Haswell): 6 x 16 tiles (12 of the 16 ymm), K blocks of 256;
  // few rows 4 x 16.
  const matmul::Plan zen3 = matmul::resolvePlan(matmulSpec(512, 512, 512, avx2(32 * kKiB, 512 * kKiB, 16 * kMiB)));
  EXPECT_EQ(zen3.mr, 6);
  EXPECT_EQ(zen3.nr(), 16);
  EXPECT_EQ(zen3.kc, 256);
  EXPECT_EQ(matmul::resolvePlan(matmulSpec(32, 512, 512, avx2(32 * kKiB, 512 * kKiB, 16 * kMiB))).mr, 4);
  EXPECT_EQ(matmul::resolvePlan(matmulSpec(512, 512, 512, avx2(48 * kKiB, 512 * kKiB, 16 * kMiB))).kc, 512);
  // Unknown caches: the fallbacks.
  const matmul::CacheModel fallback = matmul::cacheModel(avx2(0, 0, 0));
  EXPECT_EQ(fallback.l1, kFallbackL1dBytes);
  EXPECT_EQ(fallback.l2, kFallbackL2Bytes);
  EXPECT_EQ(fallback.l3, kFallbackL3Bytes);
  EXPECT_EQ(matmul::resolvePlan(matmulSpec(512, 512, 512, avx2(0, 0, 0))).kc, matmul::kcForL1(fallback, 6, 16));
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

// Where A's rows read in place would not stay in L2 between B panels (M x KC floats over half of
// L2), or all of K is one K block of more than 64 rows, the default packs A and B in blocks (BLIS)
// sized from L2 and L3; elsewhere it reads A in place as before. Parameters that name a block
// keep their meaning (A in place unless they give mc).
TEST(MatmulBlocking, DefaultPacksABlocksWhereARowsWouldNotStayInL2) {
  const KernelTarget spr = avx512(48 * kKiB, 2 * kMiB, 52 * kMiB), zen5 = avx512(48 * kKiB, 1 * kMiB, 16 * kMiB);
  const matmul::Plan big = matmul::resolvePlan(matmulSpec(1024, 1024, 1024, spr));
  EXPECT_EQ(big.mr, 6);
  EXPECT_EQ(big.kc, 512);
  EXPECT_EQ(big.mc, 252);   // 252 x 512 floats in a quarter of 2 MiB
  EXPECT_EQ(big.nc, 2048);  // 512 x 2048 floats: 4 MiB, the packed B block's cap
  EXPECT_EQ(big.prefetch, 0);
  EXPECT_GT(matmul::resolvePlan(matmulSpec(3840, 128, 1024, spr)).mc, 0);  // 1.9 MiB of A at K 128
  // On a 1 MiB L2 the same 1024^3 in packed blocks has K blocks of 512 too (two panels in a
  // quarter of L2), A blocks of 126 x 512 (a quarter of L2); with a Zen 5 guest's 2 MiB of L3 per
  // CPU, B blocks of 512 columns (1 MiB, half the share). A 512 KiB L2: K blocks of 256.
  const matmul::Plan zen = matmul::resolvePlan(matmulSpec(1024, 1024, 1024, zen5));
  EXPECT_EQ(zen.kc, 512);
  EXPECT_EQ(zen.mc, 126);
  EXPECT_EQ(zen.nc, 2048);  // 4 MiB, the cap, of a 16 MiB share
  const matmul::Plan zen_guest =
      matmul::resolvePlan(matmulSpec(1024, 1024, 1024, avx512(48 * kKiB, 1 * kMiB, 2 * kMiB)));
  EXPECT_EQ(zen_guest.kc, 512);
  EXPECT_EQ(zen_guest.mc, 126);
  EXPECT_EQ(zen_guest.nc, 512);
  EXPECT_EQ(matmul::resolvePlan(matmulSpec(1024, 1024, 1024, avx512(48 * kKiB, 512 * kKiB, 4 * kMiB))).kc, 256);
  // Where A stays in L2 at the panel-streaming K block (512^3 on 1 MiB: 512 x 256 floats in half
  // of L2), A is read in place with that K block, as before.
  const matmul::Plan zen_512 = matmul::resolvePlan(matmulSpec(512, 512, 512, zen5));
  EXPECT_EQ(zen_512.kc, 256);
  EXPECT_EQ(zen_512.mc, 0);
  // All of K in one K block, more than 64 rows: blocked too, the B block sized for that K block
  // and A in blocks of as many rows as C rows of one panel fill a quarter of L1 (48 rows of 64
  // floats in 12 KiB of 48 KiB), whatever K is.
  const matmul::Plan one_block = matmul::resolvePlan(matmulSpec(640, 128, 1024, spr));
  EXPECT_EQ(one_block.kc, 128);
  EXPECT_EQ(one_block.mc, 48);
  EXPECT_EQ(one_block.nc, 8192);  // 128 x 8192 floats: 4 MiB
  EXPECT_EQ(matmul::resolvePlan(matmulSpec(640, 512, 1024, spr)).mc, 48);
  EXPECT_EQ(matmul::resolvePlan(matmulSpec(3840, 128, 1024, zen5)).mc, 48);
  EXPECT_EQ(matmul::resolvePlan(matmulSpec(640, 128, 1024, avx512(32 * kKiB, 2 * kMiB, 52 * kMiB))).mc, 30);
  EXPECT_EQ(matmul::resolvePlan(matmulSpec(640, 128, 1024, avx512(96 * kKiB, 2 * kMiB, 52 * kMiB))).mc, 96);
  // Several K blocks: the A block from L2 as before (C is read back between K blocks anyway).
  EXPECT_EQ(big.mc, 252);
  // ...unless B has at most 4 panels and A stays in L2: A in place, K blocks from L1, no prefetch.
  const matmul::Plan cube = matmul::resolvePlan(matmulSpec(256, 256, 256, spr));
  EXPECT_EQ(cube.kc, 128);  // a 128 x 64 panel and 6 rows of A: 35 KiB of a 48 KiB L1
  EXPECT_EQ(cube.mc, 0);
  EXPECT_EQ(cube.nc, cube.nr());
  EXPECT_EQ(cube.prefetch, 0);
  const matmul::Plan five_panels = matmul::resolvePlan(matmulSpec(256, 256, 320, spr));
  EXPECT_EQ(five_panels.kc, 256);
  EXPECT_EQ(five_panels.mc, 48);
  EXPECT_EQ(matmul::resolvePlan(matmulSpec(100, 40, 1024, spr)).kc, 48);  // K rounded up to 16
  // A that stays in L2 over several K blocks, few rows, one panel: A read in place, B one panel at a time.
  for (auto [m, k, n] : {std::tuple<std::int64_t, std::int64_t, std::int64_t>{256, 1024, 256},
                         {32, 768, 4096},
                         {32, 128, 1024},
                         {4096, 512, 64}}) {
    const matmul::Plan plan = matmul::resolvePlan(matmulSpec(m, k, n, spr));
    EXPECT_EQ(plan.mc, 0) << m << "x" << k << "x" << n;
    EXPECT_EQ(plan.nc, plan.nr()) << m << "x" << k << "x" << n;
  }
  // bfloat16 keeps A in place (the pair dot products read it there).
  KernelSpec bf16 = matmulSpec(1024, 1024, 1024, spr);
  bf16.inputs[0].dtype = bf16.inputs[1].dtype = DType::BFloat16;
  EXPECT_EQ(matmul::resolvePlan(bf16).mc, 0);
  // AVX2: the 6 x 16 tile in blocks as well.
  const matmul::Plan avx2_big = matmul::resolvePlan(matmulSpec(1024, 1024, 1024, avx2(48 * kKiB, 2 * kMiB, 52 * kMiB)));
  EXPECT_EQ(avx2_big.mr, 6);
  EXPECT_EQ(avx2_big.nr(), 16);
  EXPECT_GT(avx2_big.mc, 0);
  EXPECT_EQ(avx2_big.mc % 6, 0);
  // A search-space candidate's blocks mean what they say: A in place, one panel, its prefetch.
  KernelSpec panel = matmulSpec(1024, 1024, 1024, spr);
  panel.params = KernelParams{.mr = 6, .nr = 64, .kc = 256, .nc = 64, .prefetch = 1};
  const matmul::Plan panel_plan = matmul::resolvePlan(panel);
  EXPECT_EQ(panel_plan.mc, 0);
  EXPECT_EQ(panel_plan.nc, 64);
  EXPECT_EQ(panel_plan.prefetch, 1);
  panel.params = KernelParams{.kc = 128};
  EXPECT_EQ(matmul::resolvePlan(panel).mc, 0);
  EXPECT_EQ(matmul::resolvePlan(panel).nc, 64);
  // A tile alone keeps the default's blocks, in whole tiles of its own.
  panel.params = KernelParams{.mr = 14, .nr = 32};
  const matmul::Plan tile = matmul::resolvePlan(panel);
  EXPECT_GT(tile.mc, 0);
  EXPECT_EQ(tile.mc % 14, 0);
  EXPECT_EQ(tile.nc % 32, 0);
}

// The one-K-block default (A blocks from L1: a few tiles each) against the reference: odd M, K
// and N, so the last A block holds a single row, the last row tile and the last panel are partial.
TEST(MatmulBlocking, OneKBlockDefaultMatchesTheReference) {
  const KernelTarget& isa = sharedBackend().capabilities().isa;
  if (isa.vector_bits < 512) GTEST_SKIP() << "the one-K-block blocks are AVX-512 only";
  const matmul::CacheModel caches = matmul::cacheModel(isa);
  const std::int64_t mc = matmul::mcForL1(caches, 6, 64);
  std::mt19937 rng(29);
  for (auto [m, k, n] :
       {std::tuple<std::int64_t, std::int64_t, std::int64_t>{3 * mc + 1, 40, 300}, {2 * mc + 5, 129, 333}}) {
    const std::vector<Value> inputs = {operand(DType::Float32, Shape{m, k}, rng),
                                       operand(DType::Float32, Shape{k, n}, rng)};
    const KernelSpec spec = specFor("matmul", inputs);
    const matmul::Plan plan = matmul::resolvePlan(sharedBackend().targetSpec(spec));
    ASSERT_EQ(plan.mc, mc) << m << "x" << k << "x" << n;
    EXPECT_TRUE(matchesReference(spec, inputs)) << m << "x" << k << "x" << n;
  }
}

// The blocked default on this host's own caches, against the reference: odd M and N, so the
// last A block, the last row tile and the last panel are partial.
TEST(MatmulBlocking, BlockedDefaultMatchesTheReference) {
  const KernelTarget& isa = sharedBackend().capabilities().isa;
  const matmul::CacheModel caches = matmul::cacheModel(isa);
  // K: the K block the in-place decision is made with (the panel-streaming one; blocks may then
  // take a deeper one, kcForL2Blocks).
  const std::int64_t k = isa.vector_bits >= 512 ? matmul::kcForL2(caches, 64) : matmul::kcForL1(caches, 6, 16);
  const std::int64_t m = caches.l2 / (2 * 4 * k) + 7;  // one A block of K rows: just over half of L2
  std::mt19937 rng(23);
  const std::vector<Value> inputs = {operand(DType::Float32, Shape{m, k}, rng),
                                     operand(DType::Float32, Shape{k, 100}, rng)};
  const KernelSpec spec = specFor("matmul", inputs);
  const matmul::Plan plan = matmul::resolvePlan(sharedBackend().targetSpec(spec));
  ASSERT_GT(plan.mc, 0) << "M " << m << ", K " << k;
  EXPECT_TRUE(matchesReference(spec, inputs));
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
  const int want = isa.vector_bits >= 512 ? matmul::kcForL2(caches, 64) : matmul::kcForL1(caches, 6, 16);
  EXPECT_EQ(matmul::resolvePlan(spec).kc, want);
}

}  // namespace
}  // namespace shapevm::jit
