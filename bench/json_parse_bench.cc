// Parsing request bodies (docs/robustness.md): common/json_limits.h's ParseBoundedJson beside
// nlohmann::ordered_json's plain parse and its parse with a depth callback (what ParseRequest did
// before 2026-12-08), on a chat body of N one-word messages and on an object of N keys.
//
//   build/bench/json_parse_bench
//
// The callback parse's DOM builder scans the enclosing array at every object's end (quadratic in
// the messages); ordered_json's objects compare each new key with the earlier ones (quadratic in
// the keys), which ParseBoundedJson refuses past its budget (one object of 11,585 keys).
#include <string>

#include <benchmark/benchmark.h>
#include <nlohmann/json.hpp>

#include "common/json_limits.h"

namespace tandem {
namespace {

using ojson = nlohmann::ordered_json;

std::string Messages(int n) {
  std::string s = R"({"model":"m","max_tokens":1,"messages":[)";
  for (int i = 0; i < n; ++i) s += std::string(i ? "," : "") + R"({"role":"user","content":"a"})";
  return s + "]}";
}

std::string Keys(int n) {
  std::string s = R"({"prompt":"hi","extra":{)";
  for (int i = 0; i < n; ++i) s += (i ? ",\"" : "\"") + std::to_string(i) + "\":0";
  return s + "}}";
}

std::string Body(const benchmark::State& state) {
  return state.range(0) == 0 ? Messages(static_cast<int>(state.range(1))) : Keys(static_cast<int>(state.range(1)));
}

void BM_ParseBoundedJson(benchmark::State& state) {
  const std::string body = Body(state);
  for (auto _ : state) {
    BoundedJson j = ParseBoundedJson(body, 512);
    benchmark::DoNotOptimize(j);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * body.size()));
}

void BM_PlainParse(benchmark::State& state) {
  const std::string body = Body(state);
  for (auto _ : state) {
    ojson j = ojson::parse(body, nullptr, false);
    benchmark::DoNotOptimize(j);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * body.size()));
}

void BM_DepthCallbackParse(benchmark::State& state) {
  const std::string body = Body(state);
  for (auto _ : state) {
    bool too_deep = false;
    auto depth_limit = [&too_deep](int depth, ojson::parse_event_t event, ojson&) {
      if ((event == ojson::parse_event_t::object_start || event == ojson::parse_event_t::array_start) &&
          depth >= 512)
        too_deep = true;
      return !too_deep;
    };
    ojson j = ojson::parse(body, depth_limit, false);
    benchmark::DoNotOptimize(j);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * body.size()));
}

// {0, N}: N messages; {1, N}: an object of N keys (11,000 within the budget, 80,000 refused).
void Shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"keys", "n"});
  for (int n : {10000, 40000, 160000}) b->Args({0, n});
  for (int n : {11000, 80000}) b->Args({1, n});
  b->Unit(benchmark::kMillisecond);
}
BENCHMARK(BM_ParseBoundedJson)->Apply(Shapes);
BENCHMARK(BM_PlainParse)->Apply(Shapes);
BENCHMARK(BM_DepthCallbackParse)->Apply(Shapes);

}  // namespace
}  // namespace tandem

BENCHMARK_MAIN();
