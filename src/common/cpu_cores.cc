#include "common/cpu_cores.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

namespace tandem {
namespace {

bool ReadFile(const std::string& path, std::string* out) {
  std::ifstream f(path);
  if (!f) return false;
  std::stringstream ss;
  ss << f.rdbuf();
  *out = ss.str();
  return true;
}

bool ParseInt64(std::string_view s, int64_t* v) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.remove_suffix(1);
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  if (s.empty() || s.size() > 20) return false;
  std::string str(s);
  char* end = nullptr;
  const long long x = std::strtoll(str.c_str(), &end, 10);
  if (end != str.c_str() + str.size()) return false;
  *v = x;
  return true;
}

// Every prefix of a cgroup path: "/a/b" -> "", "/a", "/a/b" (the root's limits apply too).
std::vector<std::string> Ancestry(std::string path) {
  while (!path.empty() && path.back() == '/') path.pop_back();
  std::vector<std::string> out = {""};
  for (size_t i = 1; i <= path.size(); ++i) {
    if (i == path.size() || path[i] == '/') {
      if (i > 0 && path[0] == '/') out.push_back(path.substr(0, i));
    }
  }
  return out;
}

int MinPositive(int a, int b) { return a <= 0 ? b : (b <= 0 ? a : std::min(a, b)); }

}  // namespace

int AffinityCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 0;
  return CPU_COUNT(&set);
}

int CgroupV2QuotaCores(std::string_view cpu_max) {
  const size_t space = cpu_max.find(' ');
  if (space == std::string_view::npos) return 0;
  std::string_view quota = cpu_max.substr(0, space);
  int64_t q = 0, period = 0;
  if (quota == "max" || !ParseInt64(quota, &q) || !ParseInt64(cpu_max.substr(space + 1), &period)) return 0;
  return CgroupV1QuotaCores(q, period);
}

int CgroupV1QuotaCores(int64_t quota_us, int64_t period_us) {
  if (quota_us <= 0 || period_us <= 0) return 0;
  return static_cast<int>(std::max<int64_t>(1, (quota_us + period_us - 1) / period_us));
}

int CgroupQuotaCores(const std::string& root, std::string_view proc_self_cgroup) {
  int best = 0;
  std::istringstream lines{std::string(proc_self_cgroup)};
  std::string line;
  while (std::getline(lines, line)) {
    // "hierarchy-ID:controller-list:cgroup-path"
    const size_t a = line.find(':');
    const size_t b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1);
    const std::string path = line.substr(b + 1);
    const bool v2 = line.compare(0, a, "0") == 0 && controllers.empty();
    std::string cpus = "," + controllers + ",";
    const bool v1_cpu = cpus.find(",cpu,") != std::string::npos;
    if (!v2 && !v1_cpu) continue;
    for (const std::string& p : Ancestry(path)) {
      std::string text;
      if (v2) {
        if (ReadFile(root + p + "/cpu.max", &text)) best = MinPositive(best, CgroupV2QuotaCores(text));
        continue;
      }
      for (const char* dir : {"/cpu", "/cpu,cpuacct"}) {
        std::string quota, period;
        int64_t q = 0, per = 0;
        if (ReadFile(root + dir + p + "/cpu.cfs_quota_us", &quota) &&
            ReadFile(root + dir + p + "/cpu.cfs_period_us", &period) && ParseInt64(quota, &q) &&
            ParseInt64(period, &per)) {
          best = MinPositive(best, CgroupV1QuotaCores(q, per));
        }
      }
    }
  }
  return best;
}

namespace {
int SystemQuotaCores() {
  std::string self;
  if (!ReadFile("/proc/self/cgroup", &self)) return 0;
  return CgroupQuotaCores("/sys/fs/cgroup", self);
}
}  // namespace

int UsableCores() {
  int cores = AffinityCores();
  if (cores <= 0) cores = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  return std::max(1, MinPositive(cores, SystemQuotaCores()));
}

std::string DescribeUsableCores() {
  const int quota = SystemQuotaCores();
  return std::to_string(UsableCores()) + " (affinity " + std::to_string(AffinityCores()) + ", cgroup quota " +
         (quota > 0 ? std::to_string(quota) : std::string("none")) + ")";
}

}  // namespace tandem
