// How many CPU cores this process may use: what the CPU engine sizes its threads from (issue 29).
//
// UsableCores() = the CPUs of the process's affinity mask (sched_getaffinity(2): taskset, cpusets,
// Kubernetes' static CPU manager), capped by the CPU quota of its cgroup and every ancestor's, rounded
// up (cgroup v2 `cpu.max` "QUOTA PERIOD" or "max PERIOD"; cgroup v1 `cpu.cfs_quota_us` /
// `cpu.cfs_period_us`, -1 meaning none: the kernel's cgroup documentation, "CPU Interface Files" and
// "CFS Bandwidth Control"), and at least 1. Docker's --cpus and a Kubernetes CPU limit are such quotas;
// std::thread::hardware_concurrency() sees neither.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace tandem {

int UsableCores();

// The parts, for tests and for the log line.
int AffinityCores();  // 0 when sched_getaffinity fails
// Cores allowed by a cgroup v2 cpu.max value: ceil(quota / period); 0 for "max ..." (no quota) or
// anything malformed.
int CgroupV2QuotaCores(std::string_view cpu_max);
// The same for cgroup v1's quota and period in microseconds (quota <= 0: none, 0).
int CgroupV1QuotaCores(int64_t quota_us, int64_t period_us);
// The smallest quota (in cores) on the path from `cgroup_root` through the process's cgroups as
// /proc/self/cgroup (`proc_self_cgroup`, its contents) names them, 0 when none is set. Reads files
// under cgroup_root ("/sys/fs/cgroup" in production): v2 at <root>/<path>/cpu.max, v1 at
// <root>/cpu/<path>/cpu.cfs_{quota,period}_us (also <root>/cpu,cpuacct/...).
int CgroupQuotaCores(const std::string& cgroup_root, std::string_view proc_self_cgroup);

// "2 (affinity 2, cgroup quota none)", for logs.
std::string DescribeUsableCores();

}  // namespace tandem
