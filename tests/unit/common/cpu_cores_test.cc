// common/cpu_cores.h: the cgroup quota files parsed as the kernel's cgroup documentation describes
// them (v2 cpu.max, v1 cpu.cfs_quota_us / cpu.cfs_period_us) over a fake hierarchy, and the
// affinity mask read back from a child restricted with sched_setaffinity.
#include "common/cpu_cores.h"

#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include <gtest/gtest.h>

namespace tandem {
namespace {

TEST(CpuCores, CgroupV2CpuMax) {
  EXPECT_EQ(CgroupV2QuotaCores("200000 100000\n"), 2);
  EXPECT_EQ(CgroupV2QuotaCores("150000 100000"), 2);  // 1.5 cores: rounded up
  EXPECT_EQ(CgroupV2QuotaCores("50000 100000"), 1);
  EXPECT_EQ(CgroupV2QuotaCores("max 100000\n"), 0);
  EXPECT_EQ(CgroupV2QuotaCores("100000"), 0);
  EXPECT_EQ(CgroupV2QuotaCores(""), 0);
  EXPECT_EQ(CgroupV2QuotaCores("abc 100000"), 0);
  EXPECT_EQ(CgroupV2QuotaCores("100000 0"), 0);
}

TEST(CpuCores, CgroupV1Quota) {
  EXPECT_EQ(CgroupV1QuotaCores(-1, 100000), 0);
  EXPECT_EQ(CgroupV1QuotaCores(300000, 100000), 3);
  EXPECT_EQ(CgroupV1QuotaCores(1000, 100000), 1);
}

class FakeCgroups : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = std::filesystem::temp_directory_path() / ("tandem-cgroups-" + std::to_string(getpid()));
    std::filesystem::remove_all(root_);
  }
  void TearDown() override { std::filesystem::remove_all(root_); }
  void Write(const std::string& rel, const std::string& text) {
    const auto p = root_ / rel;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p) << text;
  }
  std::filesystem::path root_;
};

TEST_F(FakeCgroups, V2TakesTheSmallestQuotaOnThePath) {
  Write("cpu.max", "max 100000\n");
  Write("kubepods/cpu.max", "400000 100000\n");
  Write("kubepods/pod1/cpu.max", "max 100000\n");
  EXPECT_EQ(CgroupQuotaCores(root_.string(), "0::/kubepods/pod1\n"), 4);
  Write("kubepods/pod1/c1/cpu.max", "250000 100000\n");
  EXPECT_EQ(CgroupQuotaCores(root_.string(), "0::/kubepods/pod1/c1\n"), 3);
  EXPECT_EQ(CgroupQuotaCores(root_.string(), "0::/\n"), 0);  // the root's "max"
  EXPECT_EQ(CgroupQuotaCores(root_.string(), "0::/elsewhere\n"), 0);
}

TEST_F(FakeCgroups, V1ReadsTheCpuController) {
  Write("cpu/docker/abc/cpu.cfs_quota_us", "150000\n");
  Write("cpu/docker/abc/cpu.cfs_period_us", "100000\n");
  Write("cpu/cpu.cfs_quota_us", "-1\n");
  Write("cpu/cpu.cfs_period_us", "100000\n");
  const std::string self = "12:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n0::/\n";
  EXPECT_EQ(CgroupQuotaCores(root_.string(), self), 2);
  // The same quota under the combined mount name.
  std::filesystem::remove_all(root_);
  Write("cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "300000\n");
  Write("cpu,cpuacct/docker/abc/cpu.cfs_period_us", "100000\n");
  EXPECT_EQ(CgroupQuotaCores(root_.string(), self), 3);
  // A controller list without cpu is not read.
  EXPECT_EQ(CgroupQuotaCores(root_.string(), "12:memory:/docker/abc\n"), 0);
}

TEST(CpuCores, UsableCoresFollowsTheAffinityMask) {
  const int all = UsableCores();
  EXPECT_GE(all, 1);
  EXPECT_LE(all, static_cast<int>(std::thread::hardware_concurrency()));
  // A child pinned to one CPU (what taskset -c 0 does) sees 1.
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(0, &one);
    if (sched_setaffinity(0, sizeof(one), &one) != 0) _exit(100);
    _exit(UsableCores());
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 1);
  EXPECT_NE(DescribeUsableCores().find("affinity"), std::string::npos);
}

}  // namespace
}  // namespace tandem
