// SPDX-License-Identifier: Apache-2.0
// Core counting (support/cpu_cores.h): cgroup v1/v2 quota text parses to cores rounded up (none
// for "max", -1 or garbage); kernel_threads accepts "auto" (0) and then follows the available
// cores minus the busy compile threads; a fixed value wins; spare cores for a compile's helper
// threads leave busy compile threads and threads running a program their cores; and this binary
// re-executed under `taskset -c 0` resolves kernel_threads=auto to exactly 1.
#include "support/cpu_cores.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

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

// A compile's helper threads take only spare cores: those neither a busy compile thread nor a
// thread running a program holds. A program thread waiting for the JIT leaves its core free.
TEST_F(CpuCoresTest, SpareCoresLeaveProgramAndCompileThreadsTheirCores) {
  const int cores = availableCores();
  ASSERT_EQ(busyProgramThreads(), 0);
  {
    const ProgramThreadBlocked outside;  // no program scope: changes nothing
    EXPECT_EQ(busyProgramThreads(), 0);
  }
  {
    const BusyProgramThread program;
    EXPECT_EQ(busyProgramThreads(), 1);
    EXPECT_EQ(spareCores(), cores - 1);
    {
      const BusyProgramThread nested;  // one thread counts once
      EXPECT_EQ(busyProgramThreads(), 1);
    }
    EXPECT_EQ(busyProgramThreads(), 1);
    const BusyCompileThread compile;
    EXPECT_EQ(spareCores(), cores - 2);
    EXPECT_EQ(kernelThreads(), std::max(1, cores - 1));  // kernels leave the compile thread its core
    {
      const ProgramThreadBlocked blocked;
      EXPECT_EQ(busyProgramThreads(), 0);
      EXPECT_EQ(spareCores(), cores - 1) << "a program waiting for the JIT holds no core";
    }
    EXPECT_EQ(busyProgramThreads(), 1);
    // Another thread running a program counts too.
    int spare_with_two = 0, programs_with_two = 0;
    std::thread([&] {
      const BusyProgramThread other;
      programs_with_two = busyProgramThreads();
      spare_with_two = spareCores();
    }).join();
    EXPECT_EQ(programs_with_two, 2);
    EXPECT_EQ(spare_with_two, cores - 3);
  }
  EXPECT_EQ(busyProgramThreads(), 0);
  // The run that just ended still holds its core for kProgramPause (calls back to back), and
  // never more than one core.
  EXPECT_GE(spareCores(), cores - 1);
  EXPECT_LE(spareCores(), cores);
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
