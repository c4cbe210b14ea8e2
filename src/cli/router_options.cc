#include "cli/router_options.h"

#include <fmt/format.h>

#include <utility>

namespace tandem::cli {

Status RouterOptions::ToConfig(router::KvRouterConfig* config) const {
  TANDEM_ASSIGN_OR_RETURN(config->mode, router::ParseRouterMode(mode));
  if (!(temperature >= 0)) {
    return Err(StatusCode::kInvalidArgument, "--router-temperature must be >= 0 but is {}",
               temperature);
  }
  if (!(overlap_weight >= 0)) {
    return Err(StatusCode::kInvalidArgument, "--kv-overlap-score-weight must be >= 0 but is {}",
               overlap_weight);
  }
  for (const auto& [flag, w] : {std::pair<const char*, double>{"--kv-host-hit-weight", host_hit_weight},
                                {"--kv-disk-hit-weight", disk_hit_weight}}) {
    if (!(w >= 0 && w <= 1)) return Err(StatusCode::kInvalidArgument, "{} must be in [0, 1] but is {}", flag, w);
  }
  config->temperature = temperature;
  config->overlap_weight = overlap_weight;
  config->host_hit_weight = host_hit_weight;
  config->disk_hit_weight = disk_hit_weight;
  return Status::Ok();
}

std::vector<std::string> RouterOptions::Args() const {
  return {"--router-mode", mode, "--router-temperature", fmt::format("{}", temperature),
          "--kv-overlap-score-weight", fmt::format("{}", overlap_weight),
          "--kv-host-hit-weight", fmt::format("{}", host_hit_weight),
          "--kv-disk-hit-weight", fmt::format("{}", disk_hit_weight)};
}

void AddRouterOptions(CLI::App& app, RouterOptions* options) {
  app.add_option("--router-mode", options->mode,
                 "How requests are placed on workers: kv (the KV-aware cost: cached prefix and "
                 "load), round-robin or random")
      ->check(CLI::IsMember({"kv", "round-robin", "random"}));
  app.add_option("--router-temperature", options->temperature,
                 "kv: 0 picks the least cost; T > 0 samples workers by exp(-normalized cost / T)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--kv-overlap-score-weight", options->overlap_weight,
                 "kv: weight of the prefill blocks (the uncached prompt) against the decode blocks "
                 "in the cost")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--kv-host-hit-weight", options->host_hit_weight,
                 "kv: what a prompt block found in a worker's host KV tier (--kv-offload-host-gib) "
                 "saves, against one in its KV pool (1)")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--kv-disk-hit-weight", options->disk_hit_weight,
                 "kv: the same for a block in a worker's disk KV tier (--kv-offload-disk-gib)")
      ->check(CLI::Range(0.0, 1.0));
}

}  // namespace tandem::cli
