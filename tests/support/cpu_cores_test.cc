// SPDX-License-Identifier: Apache-2.0
// Core counting (support/cpu_cores.h): cgroup v1/v2 quota text parses to cores rounded up (none
// for "max", -1 or garbage); kernel_threads accepts "auto" (0) and then follows the available
// cores minus the busy compile threads; a fixed value wins; and this binary re-executed under
// `taskset -c 0` resolves kernel_threads=auto to exactly 1.
#include "support/cpu_cores.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "support/tunables.h"

namespace shapevm {
namespace {

class CpuCoresTest : public testing::Test {
 protected:
  void SetUp() override { Tunables::resetToDefaults(); }
  void TearDown() override { Tunables::resetToDefaults(); }
};

TEST_F(CpuCoresTest, CgroupQuotasParseToCoresRoundedUp) {
  EXPECT_EQ(cgroupV2QuotaCores("max 100000\n"), std::nullopt);
  EXPECT_EQ(cgroupV2QuotaCores("200000 100000\n"), 2);
  EXPECT_EQ(cgroupV2QuotaCores("150000 100000"), 2);
  EXPECT_EQ(cgroupV2QuotaCores("50000 100000"), 1);
  EXPECT_EQ(cgroupV2QuotaCores("garbage"), std::nullopt);
  EXPECT_EQ(cgroupV2QuotaCores("12 x"), std::nullopt);
  EXPECT_EQ(cgroupV2QuotaCores(""), std::nullopt);
  EXPECT_EQ(cgroupV1QuotaCores("-1\n", "100000\n"), std::nullopt);
  EXPECT_EQ(cgroupV1QuotaCores("400000\n", "100000\n"), 4);
  EXPECT_EQ(cgroupV1QuotaCores("1", "0"), std::nullopt);
  EXPECT_EQ(cgroupV1QuotaCores("lots", "100000"), std::nullopt);
}

TEST_F(CpuCoresTest, AutoIsTheDefaultAndFollowsCoresMinusBusyCompileThreads) {
  EXPECT_EQ(Tunables::info(Tunable::KernelThreads).default_value, 0);
  EXPECT_TRUE(Tunables::set("kernel_threads", "3").isOk());
  EXPECT_EQ(kernelThreads(), 3);
  EXPECT_TRUE(Tunables::set("kernel_threads", "auto").isOk());
  EXPECT_EQ(Tunables::get(Tunable::KernelThreads), 0);
  EXPECT_FALSE(Tunables::set("kernel_threads", "automatic").isOk());
  const int cores = availableCores();
  ASSERT_GE(cores, 1);
  EXPECT_EQ(cores, detectAvailableCores());  // cached once; the affinity has not changed since
  EXPECT_EQ(kernelThreads(), std::max(1, cores - busyCompileThreads()));
  {
    const BusyCompileThread busy;
    EXPECT_EQ(busyCompileThreads(), 1);
    EXPECT_EQ(kernelThreads(), std::max(1, cores - 1));
  }
  EXPECT_EQ(busyCompileThreads(), 0);
  EXPECT_EQ(kernelThreads(), cores);
}

// Run as the child below: prints what kernel_threads=auto resolves to.
TEST_F(CpuCoresTest, ChildReportsAutoKernelThreads) {
  if (std::getenv("SVM_CPU_CORES_CHILD") == nullptr) GTEST_SKIP() << "only as the re-executed child";
  ASSERT_TRUE(Tunables::set("kernel_threads", "auto").isOk());
  std::printf("kernel_threads=auto -> %d\n", kernelThreads());
}

TEST_F(CpuCoresTest, KernelThreadsAutoUnderTasksetPicksOne) {
  if (access("/usr/bin/taskset", X_OK) != 0) GTEST_SKIP() << "no /usr/bin/taskset";
  std::array<char, 4096> self{};
  const ssize_t length = readlink("/proc/self/exe", self.data(), self.size() - 1);
  ASSERT_GT(length, 0);
  const std::string command = "SVM_CPU_CORES_CHILD=1 /usr/bin/taskset -c 0 '" + std::string(self.data(), length) +
                              "' --gtest_filter=CpuCoresTest.ChildReportsAutoKernelThreads 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string output;
  std::array<char, 512> buffer{};
  while (std::fgets(buffer.data(), static_cast<int>(buffer.size()), pipe) != nullptr) output += buffer.data();
  ASSERT_EQ(pclose(pipe), 0) << output;
  EXPECT_NE(output.find("kernel_threads=auto -> 1\n"), std::string::npos) << output;
}

}  // namespace
}  // namespace shapevm
