#include "loadgen/runner.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <exception>
#include <memory>
#include <optional>
#include <random>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <fmt/format.h>

#include "planner/prom_text.h"

namespace tandem::bench {

namespace asio = boost::asio;

std::vector<double> PoissonArrivals(double rate, int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::exponential_distribution<double> gap(rate);
  std::vector<double> t;
  double now = 0;
  for (int i = 0; i < n; ++i) {
    now += gap(rng);
    t.push_back(now);
  }
  return t;
}

Result<std::map<std::string, double>> ScrapeValues(const std::string& text, const std::string& prefix) {
  auto samples = planner::ParsePromText(text);
  if (!samples.ok()) return samples.status();
  std::map<std::string, double> out;
  for (const planner::PromSample& s : *samples) {
    if (s.name.compare(0, prefix.size(), prefix) != 0) continue;
    std::string key = s.name;
    if (!s.labels.empty()) {
      key += "{";
      bool first = true;
      for (const auto& [k, v] : s.labels) {
        key += fmt::format("{}{}={}", first ? "" : ",", k, v);
        first = false;
      }
      key += "}";
    }
    out[key] = s.value;
  }
  return out;
}

namespace {

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

struct Phase {
  Phase(asio::io_context& io, const ClientOptions& client, Workload& workload, int max_requests,
        double duration_s, bool record, std::string label, bool progress)
      : io(io), client(client), workload(workload), max_requests(max_requests),
        duration_s(duration_s), record(record), label(std::move(label)), progress(progress) {}
  asio::io_context& io;
  const ClientOptions& client;
  Workload& workload;
  int max_requests = 0;       // 0: no bound
  double duration_s = 0;
  bool record = true;
  std::string label;
  bool progress = false;

  Clock::time_point start = Clock::now();
  int started = 0, finished = 0, errors = 0, in_flight_items = 0;
  bool dispatch_done = false;
  std::vector<RequestRecord> records;
  std::vector<std::unique_ptr<HttpConnection>> idle;

  bool MayStart() {
    if (max_requests > 0 && started >= max_requests) return false;
    if (duration_s > 0 && Seconds(Clock::now() - start) >= duration_s) return false;
    ++started;
    return true;
  }
  bool AllDone() const { return dispatch_done && in_flight_items == 0; }

  std::unique_ptr<HttpConnection> TakeConnection() {
    if (idle.empty()) return std::make_unique<HttpConnection>(io.get_executor(), client.endpoint);
    auto c = std::move(idle.back());
    idle.pop_back();
    return c;
  }

  // A conversation in progress: its item and the server's replies so far (the next turn's history).
  struct Session {
    WorkItem item;
    std::vector<std::string> replies;
    bool failed = false;
    bool Done() const { return failed || replies.size() >= item.turns.size(); }
  };

  // Sends the session's next turn (false: the run's bounds allow no more requests).
  asio::awaitable<bool> SendNextTurn(HttpConnection& conn, Session& s) {
    if (!MayStart()) co_return false;
    const int t = static_cast<int>(s.replies.size());
    RequestRecord r = co_await SendTurn(conn, client, s.item, t, s.replies, start);
    s.replies.push_back(r.output_text);  // the next turn's history; the record keeps its own copy
    ++finished;
    s.failed = !r.ok();
    if (s.failed) ++errors;
    if (record) records.push_back(std::move(r));
    co_return true;
  }

  asio::awaitable<void> RunItem(HttpConnection& conn, WorkItem item) {
    Session s{std::move(item), {}};
    while (!s.Done() && co_await SendNextTurn(conn, s)) {
    }
  }

  void PrintProgress(bool last) {
    const std::string bound = max_requests > 0 ? fmt::format("/{}", max_requests) : "";
    std::fprintf(stderr, "\r\033[K[%s] %d%s requests done, %d running, %d errors, %.1f s%s",
                 label.c_str(), finished, bound.c_str(), started - finished, errors,
                 Seconds(Clock::now() - start), last ? "\n" : "");
    std::fflush(stderr);
  }

  // Reads config.scrape_url every interval until the phase is done (runner.h: Scrape).
  asio::awaitable<void> Scrape(const RunConfig& config, std::vector<ScrapeSample>* out, int* errors) {
    auto endpoint = ParseUrl(config.scrape_url);
    if (!endpoint.ok()) co_return;
    HttpConnection conn(io.get_executor(), *endpoint);
    asio::steady_timer timer(io);
    const auto interval = std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(std::max(0.05, config.scrape_interval_s)));
    auto next = start;
    while (!AllDone()) {
      std::string body;
      const auto sent = Clock::now();
      HttpResult r = co_await conn.Request("GET", "", "", {}, sent + std::chrono::seconds(2),
                                           [&body](std::string_view bytes, Clock::time_point) {
                                             body.append(bytes);
                                             return true;
                                           });
      auto values = r.error == ErrorKind::kNone ? ScrapeValues(body, config.scrape_prefix)
                                                : Result<std::map<std::string, double>>(
                                                      Status(StatusCode::kFailedPrecondition, r.message));
      if (values.ok()) out->push_back(ScrapeSample{Seconds(sent - start), std::move(*values)});
      else ++*errors;
      next += interval;
      if (next < Clock::now()) next = Clock::now();
      timer.expires_at(next);
      co_await timer.async_wait(asio::use_awaitable);
    }
  }

  asio::awaitable<void> Progress() {
    asio::steady_timer timer(io);
    while (!AllDone()) {
      timer.expires_after(std::chrono::milliseconds(250));
      co_await timer.async_wait(asio::use_awaitable);
      PrintProgress(AllDone());
    }
  }
};

void Rethrow(std::exception_ptr e) {
  if (e) std::rethrow_exception(e);
}

// Closed loop: one client keeps `sessions` conversations open and sends one turn of each in turn
// (round-robin, like users who read and answer between turns); a finished conversation's slot
// takes the workload's next one. With 1 session: a conversation's turns back to back.
asio::awaitable<void> ClosedLoopClient(Phase& p, int sessions) {
  HttpConnection conn(p.io.get_executor(), p.client.endpoint);
  std::deque<Phase::Session> open;
  bool workload_done = false;
  while (true) {
    if (p.max_requests > 0 && p.started >= p.max_requests) break;
    if (p.duration_s > 0 && Seconds(Clock::now() - p.start) >= p.duration_s) break;
    while (!workload_done && static_cast<int>(open.size()) < sessions) {
      std::optional<WorkItem> item = p.workload.Next();
      if (!item) workload_done = true;
      else if (!item->turns.empty()) open.push_back(Phase::Session{std::move(*item), {}});
    }
    if (open.empty()) break;
    Phase::Session s = std::move(open.front());
    open.pop_front();
    if (!co_await p.SendNextTurn(conn, s)) break;
    if (!s.Done()) open.push_back(std::move(s));
  }
  if (--p.in_flight_items == 0) p.dispatch_done = true;
}

asio::awaitable<void> OpenLoopItem(Phase& p, WorkItem item) {
  auto conn = p.TakeConnection();
  co_await p.RunItem(*conn, std::move(item));
  p.idle.push_back(std::move(conn));
  --p.in_flight_items;
}

// Open loop: items at their arrival times (Poisson, or the trace's timestamps).
asio::awaitable<void> Dispatcher(Phase& p, const RunConfig& config) {
  std::mt19937_64 rng(config.seed ^ 0xA11CE);
  std::exponential_distribution<double> gap(config.request_rate);
  asio::steady_timer timer(p.io);
  double next_s = 0;
  std::optional<double> first_timestamp;
  while (true) {
    if (p.max_requests > 0 && p.started >= p.max_requests) break;
    std::optional<WorkItem> item = p.workload.Next();
    if (!item) break;
    if (config.mode == RunConfig::Mode::kRate) {
      next_s += gap(rng);
    } else {
      if (!first_timestamp) first_timestamp = p.workload.timestamps_from_zero() ? 0.0 : item->timestamp_s;
      next_s = (item->timestamp_s - *first_timestamp) * config.time_scale;
    }
    if (p.duration_s > 0 && next_s >= p.duration_s) break;
    timer.expires_at(p.start + std::chrono::duration_cast<Clock::duration>(
                                   std::chrono::duration<double>(next_s)));
    co_await timer.async_wait(asio::use_awaitable);
    ++p.in_flight_items;
    asio::co_spawn(p.io, OpenLoopItem(p, std::move(*item)), Rethrow);
  }
  if (config.min_duration_s > 0) {  // e.g. a quiet last phase: the clock (and scraping) runs on
    timer.expires_at(p.start + std::chrono::duration_cast<Clock::duration>(
                                   std::chrono::duration<double>(config.min_duration_s)));
    co_await timer.async_wait(asio::use_awaitable);
  }
  p.dispatch_done = true;
}

void RunPhase(Phase& p, const RunConfig& config, bool closed_loop, int clients, int sessions_per_client,
              RunResult* scrape_into = nullptr) {
  p.start = Clock::now();
  if (scrape_into) {
    scrape_into->start_unix_s =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    if (!config.scrape_url.empty())
      asio::co_spawn(p.io, p.Scrape(config, &scrape_into->scrapes, &scrape_into->scrape_errors), Rethrow);
  }
  if (closed_loop) {
    p.in_flight_items = clients;
    for (int i = 0; i < clients; ++i)
      asio::co_spawn(p.io, ClosedLoopClient(p, std::max(1, sessions_per_client)), Rethrow);
  } else {
    asio::co_spawn(p.io, Dispatcher(p, config), Rethrow);
  }
  if (p.progress) asio::co_spawn(p.io, p.Progress(), Rethrow);
  p.io.restart();
  p.io.run();
}

}  // namespace

Result<RunResult> RunBenchmark(const ClientOptions& client, Workload& workload,
                               const RunConfig& config) {
  const bool open_loop = config.mode != RunConfig::Mode::kConcurrency;
  if (config.num_requests <= 0 && config.duration_s <= 0 && !workload.has_timestamps())
    return Err(StatusCode::kInvalidArgument, "bound the run with --num-requests and/or --duration");
  if (config.mode == RunConfig::Mode::kTrace && !workload.has_timestamps())
    return Err(StatusCode::kInvalidArgument, "trace replay needs a workload with timestamps");
  if (config.mode == RunConfig::Mode::kRate && !(config.request_rate > 0))
    return Err(StatusCode::kInvalidArgument, "--request-rate must be positive");
  if (!config.scrape_url.empty()) {
    if (auto ep = ParseUrl(config.scrape_url); !ep.ok()) return ep.status();
  }
  RunResult result;
  result.config = config;
  switch (config.mode) {
    case RunConfig::Mode::kConcurrency:
      result.label = config.sessions_per_client > 1
                         ? fmt::format("c={} s={}", config.concurrency, config.sessions_per_client)
                         : fmt::format("c={}", config.concurrency);
      break;
    case RunConfig::Mode::kRate: result.label = fmt::format("rate={:g}", config.request_rate); break;
    case RunConfig::Mode::kTrace: result.label = fmt::format("trace x{:g}", config.time_scale); break;
  }
  asio::io_context io;
  try {
    if (config.warmup > 0) {
      Phase warm{io, client, workload, config.warmup, 0, /*record=*/false, result.label + " warm-up",
                 config.progress};
      RunPhase(warm, config, true, open_loop ? 1 : std::min(config.concurrency, config.warmup), 1);
    }
    Phase p{io, client, workload, config.num_requests, config.duration_s, true, result.label,
            config.progress};
    RunPhase(p, config, !open_loop, config.concurrency, config.sessions_per_client, &result);
    // First send to last completion (not to the progress line's last tick).
    result.duration_s = 0;
    for (const RequestRecord& r : p.records)
      result.duration_s = std::max(result.duration_s, r.start_s + r.e2e_s);
    if (p.records.empty()) result.duration_s = Seconds(Clock::now() - p.start);
    result.records = std::move(p.records);
  } catch (const std::exception& e) {
    return Err(StatusCode::kInternal, "benchmark run failed: {}", e.what());
  }
  return result;
}

}  // namespace tandem::bench
