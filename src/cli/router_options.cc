#include "cli/router_options.h"

#include <fmt/format.h>

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
  config->temperature = temperature;
  config->overlap_weight = overlap_weight;
  return Status::Ok();
}

std::vector<std::string> RouterOptions::Args() const {
  return {"--router-mode", mode, "--router-temperature", fmt::format("{}", temperature),
          "--kv-overlap-score-weight", fmt::format("{}", overlap_weight)};
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
}

}  // namespace tandem::cli
