// SPDX-License-Identifier: Apache-2.0
// Host cache sizes (support/cpu_caches.h): sysfs size and CPU-list text parse (garbage is
// rejected), a fake sysfs cache directory reads level by level (instruction caches ignored, a
// malformed level left out), a missing directory falls back to sysconf or, without it, to the
// constants, and the host's own caches are all positive.
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
  const long l1 = sysconf(_SC_LEVEL1_DCACHE_SIZE);
  EXPECT_EQ(with_sysconf.l1d_bytes, l1 > 0 ? l1 : kFallbackL1dBytes);
  EXPECT_EQ(with_sysconf.source.find("sysfs"), std::string::npos);
  EXPECT_GE(with_sysconf.l3_sharing, 1);
}

TEST(CpuCaches, HostCachesAreAllPositive) {
  const CpuCaches& host = hostCpuCaches();
  EXPECT_GT(host.l1d_bytes, 0);
  EXPECT_GT(host.l2_bytes, host.l1d_bytes) << host.toString();
  EXPECT_GT(host.l3PerCpu(), 0) << host.toString();
}

}  // namespace
}  // namespace shapevm
