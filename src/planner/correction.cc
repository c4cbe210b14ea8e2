#include "planner/correction.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace tandem::planner {

double ProfileCorrection::ServiceTimeForTtft(double ttft_s, double rate, int workers) {
  if (!(ttft_s > 0)) return 0;
  if (!(rate > 0) || workers <= 0) return ttft_s;
  auto sojourn = [&](double s) {
    const double rho = rate * s / workers;
    return s + rho * s / (2 * (1 - rho));
  };
  double lo = 0, hi = std::min(ttft_s, workers / rate);  // sojourn(s) >= s, and rho < 1
  for (int i = 0; i < 100 && hi - lo > 1e-12 * hi; ++i) {
    const double mid = 0.5 * (lo + hi);
    (sojourn(mid) < ttft_s ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

double ProfileCorrection::Update(double f, double observed) const {
  const double a = std::clamp(config_.alpha, 1e-6, 1.0);
  const double next = std::exp((1 - a) * std::log(f) + a * std::log(observed));
  return std::clamp(next, config_.min_factor, config_.max_factor);
}

void ProfileCorrection::Observe(const Profile& profile, const ObservedLatency& o, std::string* why) {
  if (!config_.enabled) return;
  const double s_profile = profile.PrefillMs(o.uncached_prompt_tokens);
  // The first interval has nothing to compare its counts with: taken as steady.
  const bool prefill_steady = last_prefill_workers_ < 0 || o.prefill_workers == last_prefill_workers_;
  const bool decode_steady = last_decode_workers_ < 0 || o.decode_workers == last_decode_workers_;
  last_prefill_workers_ = o.prefill_workers;
  last_decode_workers_ = o.decode_workers;
  if (!prefill_steady || !decode_steady) {
    const char* which = !prefill_steady && !decode_steady ? "each pool's" : !prefill_steady ? "the prefill" : "the decode";
    *why += fmt::format(" correction: {} count changed, its factor kept;", which);
  }
  const bool prefill_counts = prefill_steady && o.ttft_count >= config_.min_samples;
  if (prefill_counts && o.uncached_prompt_tokens <= config_.local_prefill_tokens) {
    *why += fmt::format(" correction: prefill kept at x{:.2f} (prompts of {:.0f} tokens are prefilled on the decode "
                        "workers);", prefill_, o.uncached_prompt_tokens);
  } else if (prefill_counts && o.ttft_ms > 0 && s_profile > 0 && o.prefill_workers > 0) {
    const double s = 1000 * ServiceTimeForTtft(o.ttft_ms / 1000, o.first_token_rate, o.prefill_workers);
    if (s > 0) {
      prefill_ = Update(prefill_, s / s_profile);
      *why += fmt::format(" correction: prefill {:.0f} ms observed TTFT -> {:.0f} ms service vs profile {:.0f} "
                          "-> x{:.2f};", o.ttft_ms, s, s_profile, prefill_);
    }
  }
  if (decode_steady && o.itl_count >= config_.min_samples && o.itl_ms > 0 && o.decode_workers > 0) {
    const double batch = std::max(1.0, o.mean_decoding / o.decode_workers);
    const double predicted = profile.ItlMs(o.context_tokens, batch);
    if (predicted > 0) {
      decode_ = Update(decode_, o.itl_ms / predicted);
      *why += fmt::format(" correction: decode {:.1f} ms observed ITL vs profile {:.1f} at batch {:.1f} -> x{:.2f};",
                          o.itl_ms, predicted, batch, decode_);
    }
  }
}

}  // namespace tandem::planner
