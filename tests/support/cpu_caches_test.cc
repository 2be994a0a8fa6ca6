// SPDX-License-Identifier: Apache-2.0
// Host cache sizes (support/cpu_caches.h): sysfs size and CPU-list text parse (garbage is
// rejected), a fake sysfs cache directory reads level by level (instruction caches ignored, a
// malformed level left out), a missing directory falls back to cpuid, sysconf or, without them,
// to the constants (implausible sizes skipped, an L3 share per CPU bounded), cpuid's cache leaf
// decodes, and the host's own caches are all positive.
#include "support/cpu_caches.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace shapevm {
namespace {

TEST(CpuCaches, SizeAndCpuListTextParse) {
  EXPECT_EQ(parseCacheSize("32K\n"), 32 * 1024);
  EXPECT_EQ(parseCacheSize("32768K"), std::int64_t{32} << 20);
  EXPECT_EQ(parseCacheSize("2M"), std::int64_t{2} << 20);
  EXPECT_EQ(parseCacheSize("4096"), 4096);
  EXPECT_EQ(parseCacheSize(""), -1);
  EXPECT_EQ(parseCacheSize("K"), -1);
  EXPECT_EQ(parseCacheSize("12Q"), -1);
  EXPECT_EQ(parseCacheSize("-4K"), -1);
  EXPECT_EQ(countCpuList("0-1\n"), 2);
  EXPECT_EQ(countCpuList("0-1,4,6-7"), 5);
  EXPECT_EQ(countCpuList("3"), 1);
  EXPECT_EQ(countCpuList(""), 0);
  EXPECT_EQ(countCpuList("4-2"), 0);
  EXPECT_EQ(countCpuList("a-b"), 0);
}

class FakeSysfs : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("svm_cpu_caches_" + std::to_string(getpid()) + "_" +
                                                     testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void index(int i, const std::string& level, const std::string& type, const std::string& size,
             const std::string& shared = "") {
    const std::filesystem::path path = dir_ / ("index" + std::to_string(i));
    std::filesystem::create_directories(path);
    std::ofstream(path / "level") << level << "\n";
    std::ofstream(path / "type") << type << "\n";
    std::ofstream(path / "size") << size << "\n";
    if (!shared.empty()) std::ofstream(path / "shared_cpu_list") << shared << "\n";
  }
  std::filesystem::path dir_;
};

TEST_F(FakeSysfs, ReadsEveryLevel) {
  index(0, "1", "Data", "48K", "0,56");
  index(1, "1", "Instruction", "32K", "0,56");
  index(2, "2", "Unified", "2048K", "0,56");
  index(3, "3", "Unified", "107520K", "0-55,112-167");
  const CpuCaches caches = detectCpuCaches(dir_.string(), /*use_sysconf=*/false);
  EXPECT_EQ(caches.l1d_bytes, 48 * 1024);
  EXPECT_EQ(caches.l2_bytes, std::int64_t{2} << 20);
  EXPECT_EQ(caches.l3_bytes, std::int64_t{105} << 20);
  EXPECT_EQ(caches.l3_sharing, 112);
  EXPECT_EQ(caches.l3PerCpu(), (std::int64_t{105} << 20) / 112);
  EXPECT_EQ(caches.source, "l1d=sysfs l2=sysfs l3=sysfs");
}

TEST_F(FakeSysfs, MalformedOrMissingLevelsFallBack) {
  index(0, "1", "Data", "32K");
  index(2, "2", "Unified", "lots");  // malformed: the L2 is left out
  EXPECT_EQ(readSysfsCaches(dir_.string()).l2_bytes, 0);
  const CpuCaches caches = detectCpuCaches(dir_.string(), /*use_sysconf=*/false);
  EXPECT_EQ(caches.l1d_bytes, 32 * 1024);
  EXPECT_EQ(caches.l2_bytes, kFallbackL2Bytes);
  EXPECT_EQ(caches.l3_bytes, kFallbackL3Bytes);
  EXPECT_EQ(caches.l3_sharing, 1);
  EXPECT_EQ(caches.source, "l1d=sysfs l2=fallback l3=fallback");
}

TEST_F(FakeSysfs, NoSysfsUsesSysconfThenConstants) {
  const std::string missing = (dir_ / "absent").string();
  const CpuCaches constants = detectCpuCaches(missing, /*use_sysconf=*/false);
  EXPECT_EQ(constants.l1d_bytes, kFallbackL1dBytes);
  EXPECT_EQ(constants.l2_bytes, kFallbackL2Bytes);
  EXPECT_EQ(constants.l3_bytes, kFallbackL3Bytes);
  EXPECT_EQ(constants.source, "l1d=fallback l2=fallback l3=fallback");
  const CpuCaches with_sysconf = detectCpuCaches(missing);
  EXPECT_EQ(with_sysconf.source.find("sysfs"), std::string::npos);
  EXPECT_GE(with_sysconf.l3_sharing, 1);
  CacheProbe probe;
  probe.sysconf_l1d = 48 << 10;
  probe.sysconf_l2 = 1 << 20;
  const CpuCaches from_sysconf = detectCpuCaches(missing, probe);
  EXPECT_EQ(from_sysconf.l1d_bytes, 48 << 10);
  EXPECT_EQ(from_sysconf.l2_bytes, 1 << 20);
  EXPECT_EQ(from_sysconf.l3_bytes, kFallbackL3Bytes);
  EXPECT_EQ(from_sysconf.source, "l1d=sysconf l2=sysconf l3=fallback");
}

// A cpuid deterministic cache subleaf decodes to its size and sharing: a Zen 5 CCX's L3 (32 MiB,
// 16 ways x 64-byte lines x 32768 sets, shared by 16 logical CPUs), an L1 instruction cache,
// and the empty subleaf that ends the list.
TEST(CpuCaches, CpuidCacheLeafDecodes) {
  const std::uint32_t l3_eax = 3u | (3u << 5) | (15u << 14);
  const CpuidCache l3 = decodeCpuidCacheLeaf(l3_eax, (15u << 22) | 63u, 32767u);
  EXPECT_EQ(l3.level, 3);
  EXPECT_TRUE(l3.data);
  EXPECT_EQ(l3.bytes, std::int64_t{32} << 20);
  EXPECT_EQ(l3.sharing, 16);
  const CpuidCache l1i = decodeCpuidCacheLeaf(2u | (1u << 5), (7u << 22) | 63u, 63u);
  EXPECT_EQ(l1i.level, 1);
  EXPECT_FALSE(l1i.data);
  EXPECT_EQ(l1i.bytes, 32 << 10);
  EXPECT_EQ(decodeCpuidCacheLeaf(0, 12345, 678).level, 0);
}

// No sysfs: cpuid's deterministic leaf wins over sysconf, with the L3's sharing from cpuid.
TEST_F(FakeSysfs, CpuidBeforeSysconf) {
  CacheProbe probe;
  probe.cpuid_l1d = 48 << 10;
  probe.cpuid_l2 = 1 << 20;
  probe.cpuid_l3 = std::int64_t{32} << 20;
  probe.cpuid_l3_sharing = 16;
  probe.sysconf_l1d = 32 << 10;
  probe.sysconf_l3 = std::int64_t{508} << 20;
  probe.online_cpus = 2;
  const CpuCaches caches = detectCpuCaches((dir_ / "absent").string(), probe);
  EXPECT_EQ(caches.l1d_bytes, 48 << 10);
  EXPECT_EQ(caches.l2_bytes, 1 << 20);
  EXPECT_EQ(caches.l3_bytes, std::int64_t{32} << 20);
  EXPECT_EQ(caches.l3_sharing, 16);
  EXPECT_EQ(caches.l3PerCpu(), std::int64_t{2} << 20);
  EXPECT_EQ(caches.source, "l1d=cpuid l2=cpuid l3=cpuid");
}

// The 2-vCPU Zen 5 EPYC guest this was found on: no sysfs cache directory, cpuid's 0x8000001D
// empty, sysconf's L3 every CCX's together (532676608 bytes = 508 MiB), 2 CPUs online, cpuid
// leaf 1 says 254 logical CPUs in the package. Divided by the online CPUs that was 254 MiB of
// L3 per CPU; by the package's CPUs it is 2 MiB, a Zen 5 CCX's 32 MiB over its 16 threads. With
// leaf 1 missing too, the share is capped at kMaxL3PerCpuBytes.
TEST_F(FakeSysfs, BogusSysconfL3IsSharedByThePackage) {
  CacheProbe probe;
  probe.sysconf_l1d = 48 << 10;
  probe.sysconf_l2 = 1 << 20;
  probe.sysconf_l3 = 532676608;
  probe.online_cpus = 2;
  probe.package_cpus = 254;
  const std::string missing = (dir_ / "absent").string();
  const CpuCaches caches = detectCpuCaches(missing, probe);
  EXPECT_EQ(caches.l3_bytes, 532676608);
  EXPECT_EQ(caches.l3_sharing, 254);
  EXPECT_EQ(caches.l3PerCpu(), std::int64_t{2} << 20);
  EXPECT_EQ(caches.source, "l1d=sysconf l2=sysconf l3=sysconf");
  probe.package_cpus = 0;
  const CpuCaches capped = detectCpuCaches(missing, probe);
  EXPECT_LE(capped.l3PerCpu(), kMaxL3PerCpuBytes);
  EXPECT_GT(capped.l3PerCpu(), kMaxL3PerCpuBytes / 2);
  EXPECT_EQ(capped.source, "l1d=sysconf l2=sysconf l3=sysconf (l3 share capped)");
}

// Figures no core has are skipped for the next source: an L1d of 4 GiB from cpuid, an L2 of
// 1 KiB from sysfs, an L3 of 16 TiB from sysconf.
TEST_F(FakeSysfs, ImplausibleSizesAreSkipped) {
  index(0, "2", "Unified", "1K");
  CacheProbe probe;
  probe.cpuid_l1d = std::int64_t{4} << 30;
  probe.sysconf_l1d = 32 << 10;
  probe.sysconf_l2 = 2 << 20;
  probe.sysconf_l3 = std::int64_t{16} << 40;
  probe.online_cpus = 4;
  const CpuCaches caches = detectCpuCaches(dir_.string(), probe);
  EXPECT_EQ(caches.l1d_bytes, 32 << 10);
  EXPECT_EQ(caches.l2_bytes, 2 << 20);
  EXPECT_EQ(caches.l3_bytes, kFallbackL3Bytes);
  EXPECT_EQ(caches.l3_sharing, 1);
  EXPECT_EQ(caches.source, "l1d=sysconf l2=sysconf l3=fallback");
}

TEST(CpuCaches, HostCachesAreAllPositive) {
  const CpuCaches& host = hostCpuCaches();
  EXPECT_GT(host.l1d_bytes, 0);
  EXPECT_GT(host.l2_bytes, host.l1d_bytes) << host.toString();
  EXPECT_GT(host.l3PerCpu(), 0) << host.toString();
  // sysfs's sharing is taken as it is; any other source's is bounded.
  if (host.source.find("l3=sysfs") == std::string::npos) {
    EXPECT_LE(host.l3PerCpu(), kMaxL3PerCpuBytes) << host.toString();
  }
}

}  // namespace
}  // namespace shapevm
