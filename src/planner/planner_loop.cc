#include "planner/planner_loop.h"

#include <chrono>

#include "common/logging.h"
#include "planner/prom_text.h"

namespace tandem::planner {
namespace {

double SteadySeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

PlannerLoop::PlannerLoop(ReplicaPlanner planner, ScaleConnector* connector, PlannerLoopOptions options,
                         metrics::Registry* registry)
    : planner_(std::move(planner)), connector_(connector), options_(std::move(options)), registry_(registry) {}

PlannerLoop::~PlannerLoop() { Stop(); }

void PlannerLoop::Start() {
  std::lock_guard<std::mutex> lock(mu_);
  if (thread_.joinable()) return;
  stop_ = false;
  thread_ = std::thread([this] { Run(); });
}

void PlannerLoop::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void PlannerLoop::Run() {
  const auto interval = std::chrono::duration<double>(options_.interval_s);
  auto next = std::chrono::steady_clock::now();
  while (true) {
    Step(SteadySeconds());
    next += std::chrono::duration_cast<std::chrono::steady_clock::duration>(interval);
    std::unique_lock<std::mutex> lock(mu_);
    if (cv_.wait_until(lock, next, [this] { return stop_; })) return;
  }
}

std::optional<ReplicaDecision> PlannerLoop::Step(double now_s) {
  auto count_error = [this](const char* source) {
    if (registry_) {
      registry_->GetCounter("tandem_planner_errors_total", "Planner errors by source.", {{"source", source}}).Inc();
    }
  };
  LoadSample sample;  // invalid unless the frontend could be read
  sample.time_s = now_s;
  Result<std::string> text = options_.scrape ? options_.scrape() : Status(StatusCode::kFailedPrecondition, "no scrape");
  Result<std::vector<PromSample>> samples =
      text.ok() ? ParsePromText(*text) : Result<std::vector<PromSample>>(text.status());
  Result<FrontendReading> reading =
      samples.ok() ? ReadFrontend(*samples, now_s) : Result<FrontendReading>(samples.status());
  if (!reading.ok()) {
    count_error("metrics");
    log::warn("planner: cannot read the frontend's metrics: {}", reading.status().message());
  } else if (!prev_) {
    prev_ = *reading;  // the baseline
    log::info("planner: baseline reading taken; the first decision in {:.0f} s", options_.interval_s);
    return std::nullopt;
  } else {
    sample = MeterInterval(*prev_, *reading, last_sample_ ? &*last_sample_ : nullptr);
    prev_ = *reading;
    if (sample.valid) last_sample_ = sample;
  }

  Result<RoleCounts> current = connector_->Current();
  if (!current.ok()) {
    count_error("connector");
    log::warn("planner: {} connector: {}", connector_->name(), current.status().message());
    return std::nullopt;
  }
  // A manual edit since the last decision becomes a bound.
  if (last_applied_ && !(*current == *last_applied_)) {
    auto respect = [&](bool prefill, int now_count, int applied) {
      if (now_count == applied) return;
      const PlannerConfig& c = planner_.config();
      const int lo = prefill ? c.min_prefill : c.min_decode, hi = prefill ? c.max_prefill : c.max_decode;
      const int new_lo = now_count > applied ? now_count : std::min(lo, now_count);
      const int new_hi = now_count < applied ? now_count : std::max(hi, now_count);
      if (planner_.SetBounds(prefill, new_lo, new_hi).ok()) {
        log::info("planner: {} replicas set to {} outside the planner (it had asked for {}): bounds now "
                  "[{}, {}]", prefill ? "prefill" : "decode", now_count, applied, new_lo, new_hi);
      }
    };
    respect(true, current->prefill, last_applied_->prefill);
    respect(false, current->decode, last_applied_->decode);
  }

  ReplicaDecision d = planner_.Plan(sample, now_s, current->prefill, current->decode);
  const RoleCounts want{d.prefill, d.decode};
  const char* outcome = d.held ? "held" : want == *current ? "unchanged" : "scaled";
  log::info("planner: prefill {} -> {}, decode {} -> {} ({}): {}", current->prefill, d.prefill,
            current->decode, d.decode, outcome, d.reason);
  last_applied_ = *current;
  if (!(want == *current)) {
    if (Status st = connector_->Apply(want); !st.ok()) {
      count_error("connector");
      log::warn("planner: {} connector could not apply prefill {} decode {}: {}", connector_->name(),
                want.prefill, want.decode, st.message());
    } else {
      last_applied_ = want;
    }
  }
  if (registry_) {
    registry_->GetCounter("tandem_planner_decisions_total", "Planner decisions by outcome.",
                          {{"outcome", outcome}}).Inc();
  }
  Export(sample, *current, d);
  return d;
}

void PlannerLoop::Export(const LoadSample& s, const RoleCounts& current, const ReplicaDecision& d) {
  if (!registry_) return;
  metrics::Registry& r = *registry_;
  r.GetGauge("tandem_planner_desired_replicas", "The planner's last decision.", {{"role", "prefill"}}).Set(d.prefill);
  r.GetGauge("tandem_planner_desired_replicas", "The planner's last decision.", {{"role", "decode"}}).Set(d.decode);
  r.GetGauge("tandem_planner_current_replicas", "Workers the connector reported.", {{"role", "prefill"}})
      .Set(current.prefill);
  r.GetGauge("tandem_planner_current_replicas", "Workers the connector reported.", {{"role", "decode"}})
      .Set(current.decode);
  r.GetGauge("tandem_planner_profile_correction", "Factor on the profile's times, refined online.",
             {{"role", "prefill"}}).Set(planner_.correction().prefill());
  r.GetGauge("tandem_planner_profile_correction", "Factor on the profile's times, refined online.",
             {{"role", "decode"}}).Set(planner_.correction().decode());
  if (!s.valid) return;
  r.GetGauge("tandem_planner_request_rate", "Arrivals per second over the last interval.").Set(s.request_rate);
  r.GetGauge("tandem_planner_mean_prompt_tokens", "Mean prompt length over the last interval.")
      .Set(s.mean_prompt_tokens);
  r.GetGauge("tandem_planner_mean_output_tokens", "Mean output length over the last interval.")
      .Set(s.mean_output_tokens);
  r.GetGauge("tandem_planner_prefix_hit_rate", "Prefix-cache hit rate over the last interval.")
      .Set(s.prefix_hit_rate);
  r.GetGauge("tandem_planner_queued_prefill_tokens", "Prompt tokens waiting for their first token.")
      .Set(s.queued_prefill_tokens);
  r.GetGauge("tandem_planner_requests_in_flight", "Requests running or waiting when last read.")
      .Set(s.requests_in_flight);
}

}  // namespace tandem::planner
