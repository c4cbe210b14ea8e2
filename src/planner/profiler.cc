#include "planner/profiler.h"

#include <algorithm>
#include <chrono>
#include <random>
#include <string>

#include <fmt/format.h>

namespace tandem::planner {

namespace {

using Clock = std::chrono::steady_clock;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

double MsSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

class Sweep {
 public:
  Sweep(Engine& engine, uint64_t seed) : engine_(engine), rng_(seed) {
    vocab_ = std::max(200, std::min(engine.model_config().vocab_size, 5100));
  }

  std::vector<int32_t> Prompt(int n) {
    std::uniform_int_distribution<int32_t> tok(100, vocab_ - 1);
    std::vector<int32_t> p(static_cast<size_t>(n));
    for (int32_t& t : p) t = tok(rng_);
    return p;
  }

  // One lone prompt of n tokens to its first token (ms).
  Result<double> Prefill(int n) {
    SamplingParams params;
    params.max_tokens = 1;
    params.ignore_eos = true;
    params.temperature = 0;  // greedy, as the decode sweep below
    const std::string id = fmt::format("profile-p{}-{}", n, serial_++);
    const auto t0 = Clock::now();
    TANDEM_RETURN_IF_ERROR(engine_.AddRequest(id, Prompt(n), params));
    for (int guard = 0; guard < 1000000; ++guard) {
      for (const RequestOutput& o : engine_.Step()) {
        if (o.request_id != id) continue;
        if (o.finish_reason == FinishReason::kError) return Status(StatusCode::kInternal, o.error);
        if (!o.new_token_ids.empty() || o.finished) {
          const double ms = MsSince(t0);
          Drain();
          return ms;
        }
      }
      if (!engine_.HasUnfinishedRequests()) break;
    }
    return Status(StatusCode::kInternal, "profile: a prefill request ended without a token");
  }

  // The median step (ms) of `batch` requests of `context` tokens in decode.
  Result<double> Decode(int context, int batch, int steps) {
    SamplingParams params;
    params.max_tokens = steps + 8;
    params.ignore_eos = true;
    // Greedy, as `tandem bench` and the planner's load test send: a sampled row costs the host
    // runner more (the tiny model's decode step at batch 4 took 21 ms sampled at temperature 1,
    // 10.6 ms greedy), and what traffic samples with is the online correction's to learn.
    params.temperature = 0;
    std::vector<std::string> ids;
    for (int i = 0; i < batch; ++i) {
      ids.push_back(fmt::format("profile-d{}-{}-{}", context, batch, serial_++));
      if (Status st = engine_.AddRequest(ids.back(), Prompt(context), params); !st.ok()) {
        Abort(ids);
        return st;
      }
    }
    // Until every request has its first token (its prompt computed).
    std::vector<bool> started(ids.size(), false);
    size_t num_started = 0;
    for (int guard = 0; num_started < ids.size() && guard < 100000; ++guard) {
      for (const RequestOutput& o : engine_.Step()) {
        if (o.finish_reason == FinishReason::kError) {
          Abort(ids);
          return Status(StatusCode::kInternal, o.error);
        }
        for (size_t i = 0; i < ids.size(); ++i) {
          if (o.request_id == ids[i] && !o.new_token_ids.empty() && !started[i]) {
            started[i] = true;
            ++num_started;
          }
        }
      }
    }
    std::vector<double> times;
    for (int s = 0; s < steps; ++s) {
      const auto t0 = Clock::now();
      (void)engine_.Step();
      times.push_back(MsSince(t0));
    }
    Abort(ids);
    return Median(times);
  }

 private:
  void Abort(const std::vector<std::string>& ids) {
    for (const std::string& id : ids) engine_.AbortRequest(id);
    Drain();
  }
  void Drain() {
    for (int guard = 0; engine_.HasUnfinishedRequests() && guard < 100000; ++guard) (void)engine_.Step();
  }

  Engine& engine_;
  std::mt19937_64 rng_;
  int vocab_;
  int serial_ = 0;
};

}  // namespace

Result<Profile> MeasureProfile(Engine& engine, const ProfileSpec& spec, std::vector<std::string>* skipped) {
  if (engine.HasUnfinishedRequests()) {
    return Status(StatusCode::kFailedPrecondition, "profile: the engine has requests in flight");
  }
  const EngineConfig& config = engine.config();
  const EngineStats stats = engine.Stats();
  const int64_t pool_tokens = int64_t{stats.num_kv_blocks_total} * config.block_size;
  Sweep sweep(engine, spec.seed);
  Profile profile;
  auto skip = [&](std::string why) {
    if (skipped != nullptr) skipped->push_back(std::move(why));
  };
  for (int n : spec.prompt_lens) {
    if (n < 1 || n + 1 > config.max_model_len || n + 1 > pool_tokens) {
      skip(fmt::format("prefill of {} tokens (max_model_len {}, a pool of {} tokens)", n,
                       config.max_model_len, pool_tokens));
      continue;
    }
    std::vector<double> times;
    for (int r = -1; r < std::max(1, spec.repeats); ++r) {
      TANDEM_ASSIGN_OR_RETURN(const double ms, sweep.Prefill(n));
      if (r >= 0) times.push_back(ms);
    }
    profile.prefill.push_back({n, Median(times)});
  }
  for (int c : spec.contexts) {
    for (int b : spec.batches) {
      const int64_t need = int64_t{b} * (c + spec.decode_steps + 8 + config.block_size);
      if (c < 1 || b < 1 || b > config.max_num_seqs || c + spec.decode_steps + 8 > config.max_model_len ||
          need > pool_tokens) {
        skip(fmt::format("decode of {} x {} tokens (max_num_seqs {}, a pool of {} tokens)", b, c,
                         config.max_num_seqs, pool_tokens));
        continue;
      }
      TANDEM_ASSIGN_OR_RETURN(const double ms, sweep.Decode(c, b, std::max(1, spec.decode_steps)));
      profile.decode.push_back({c, b, ms});
    }
  }
  if (profile.prefill.empty() || profile.decode.empty()) {
    return Status(StatusCode::kFailedPrecondition,
                  "profile: no prefill or no decode shape fits this engine (see the skipped shapes)");
  }
  // Sorted and checked as a loaded profile is.
  return ProfileFromJson(ToJson(profile));
}

}  // namespace tandem::planner
