#include "deploy/graph_planner.h"

#include <yaml-cpp/yaml.h>

#include <filesystem>

#include "deploy/yaml_fields.h"

namespace tandem::runtime {

GraphPlanner ParsePlannerSection(const YamlFields& f, const YAML::Node& n, const std::string& base_dir) {
  namespace fs = std::filesystem;
  GraphPlanner p;
  p.enabled = true;
  p.line = n.Mark().line + 1;
  bool has_profile = false;
  auto bounds = [&f](const YAML::Node& v, const std::string& role, int* lo, int* hi) {
    bool has_min = false, has_max = false;
    for (const auto& [key, b] : f.Fields(v, "planner." + role, {"min", "max"})) {
      if (key == "min") *lo = f.Int(b, key, 0, 1024), has_min = true;
      if (key == "max") *hi = f.Int(b, key, 0, 1024), has_max = true;
    }
    if (!has_min || !has_max) f.Fail(v, "planner." + role + " needs both 'min' and 'max'");
    if (*lo > *hi) f.Fail(v, "planner." + role + ": 'min' is above 'max'");
  };
  for (const auto& [key, v] :
       f.Fields(n, "planner", {"profile", "ttft_ms", "itl_ms", "interval_s", "prefill", "decode", "budget",
                               "predictor", "scale_down_intervals", "cooldown_s", "drain_timeout_s",
                               "metrics_port", "correction"})) {
    if (key == "profile") {
      fs::path path = f.String(v, key);
      if (path.empty()) f.Fail(v, "'profile' must not be empty");
      if (path.is_relative()) path = fs::path(base_dir.empty() ? "." : base_dir) / path;
      p.profile = fs::absolute(path).lexically_normal().string();
      has_profile = true;
    }
    auto positive = [&](const YAML::Node& x, const std::string& k) {
      const double d = f.Number(x, k, 0);
      if (!(d > 0)) f.Fail(x, "'" + k + "' must be positive");
      return d;
    };
    if (key == "ttft_ms") p.ttft_ms = positive(v, key);
    if (key == "itl_ms") p.itl_ms = positive(v, key);
    if (key == "interval_s") p.interval_s = positive(v, key);
    if (key == "prefill") bounds(v, key, &p.min_prefill, &p.max_prefill);
    if (key == "decode") bounds(v, key, &p.min_decode, &p.max_decode);
    if (key == "budget") p.budget = f.Int(v, key, 0, 2048);
    if (key == "predictor") p.predictor = f.OneOf(v, key, {"constant", "ewma", "linear-trend"});
    if (key == "scale_down_intervals") p.scale_down_intervals = f.Int(v, key, 1, 1000);
    if (key == "cooldown_s") p.cooldown_s = f.Number(v, key, 0);
    if (key == "drain_timeout_s") p.drain_timeout_s = f.Number(v, key, 0);
    if (key == "metrics_port") p.metrics_port = f.Int(v, key, 0, 65535);
    if (key == "correction") p.correction = f.Bool(v, key);
  }
  if (!has_profile) f.Fail(n, "planner: 'profile' is required (the JSON of `tandem profile`)");
  if (p.budget > 0 && p.budget < p.min_prefill + p.min_decode) {
    f.Fail(n, "planner: a budget of " + std::to_string(p.budget) + " workers is below the minima");
  }
  return p;
}

}  // namespace tandem::runtime
