// cuda_engine_bench: decode throughput and prefill latency through tandem's real Engine
// (engine/engine.h: Engine::Create, AddRequest, Step) on the CUDA ModelRunner (or the CPU one,
// --cpu, for trying the tool out on a small model).
//
// Decode at batch B: B requests of --context random prompt tokens, greedy (temperature 0),
// ignore_eos, max_tokens large enough; the steps until every request has its first token are the
// prefill phase (not timed); then --warmup steps, then --steps timed steps in which every request
// decodes one token (each Step() checked to give exactly B outputs of one token). The remaining
// requests are aborted. tokens/s = B * steps / (sum of the timed Step() times).
// Prefill of T tokens: one request of T random tokens, max_tokens 1, max_num_batched_tokens >= T
// so it is one step; one untimed run first, then --repeats timed runs (fresh tokens, so no prefix
// cache hit); the median of the Step() times (host clock: Step returns after the device finished,
// the sampled token being on the host).
// Closed loop at concurrency c (--closed-loop, the work scripts/gpu-serve-bench.sh sends a server
// through HTTP, here straight into the engine): min(c, 16) warm-up requests, then max(8, 2 c)
// requests of --input-len random tokens and --output-len tokens, c at a time, the next added as one
// finishes; output tokens / wall time.
//
// One engine for all shapes: max_num_seqs = the largest batch, num_kv_blocks sized for
// max(batch) x (context + max_tokens) tokens, the closed loops' c x (input + output), or the
// longest prefill (block 16).
// Prints one line per shape and, with --json FILE, writes the numbers for scripts/gpu/bench_table.py.
// Usage: cuda_engine_bench MODEL_DIR [--batches 1,8,64,256] [--context 1024] [--steps 32]
//        [--warmup 2] [--prefill 512,2048,8192] [--repeats 3] [--budget N] [--timeline N]
//        [--json FILE] [--cpu] [--quantization fp8] [--kv-cache-dtype fp8] [--async-scheduling]
//        [--closed-loop 1,16,64,256] [--input-len 1024] [--output-len 256]
// --quantization fp8: the checkpoint's linear projections quantized to FP8 per channel at load
// (or an FP8 checkpoint as stored), the CUDA runner's FP8 path (kernels/cuda/fp8_linear.h).
// --kv-cache-dtype fp8: an FP8 E4M3 KV cache (half of bf16's bytes; kernels/cuda/paged_attention.h).
// --async-scheduling: the overlapped engine loop (EngineConfig::async_scheduling): a decode Step()
// then returns one step's tokens while the next step runs, so the sum of the Step() times is still
// the wall time of the steps; --timeline attaches a step timeline, under which steps run
// synchronously (the timeline lines are then the synchronous loop's).
// --timeline N: for each prefill, one more untimed prefill with its kernel groups timed; for each
// decode batch, the timed steps' host phases, then N more steps with
// per-kernel-group device time launched eagerly and N from graphs with event nodes between the
// groups (model/step_timeline.h), printed as "timeline" lines: ms/step of each phase and group
// (eager, graph), and for the weight-reading groups and attention the floor at 4.27 TB/s /
// 796 TFLOP/s (DESIGN.md section 5: the H200's measured copy and bf16 GEMM ceilings) with the
// group's % of it.
// Env TANDEM_CUDA_GRAPHS (when the runner reads it) switches CUDA graphs; it is echoed in the JSON.
// Exit 0, 2 on an error, 77 with no CUDA device.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "engine/engine.h"
#include "model/cuda_model_runner.h"
#include "model/model_runner.h"
#include "model/step_timeline.h"

namespace tandem {
namespace {

constexpr int kBlockSize = 16;

// max_tokens of the decode requests: room for the prefill phase (the first requests decode while
// later ones prefill, about batch * context / budget steps), the warm-up and the timed steps, and
// with --timeline N the N eager timeline steps, one capture step and the N graph timeline steps.
int DecodeMaxTokens(int batch, int context, int budget, int warmup, int steps, int timeline) {
  return 2 * ((batch * context + budget - 1) / budget + 2) + warmup + steps +
         (timeline > 0 ? 2 * timeline + 1 : 0) + 8;
}

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::vector<int> ParseList(const std::string& s) {
  std::vector<int> v;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty()) v.push_back(std::atoi(item.c_str()));
  }
  return v;
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct Args {
  std::string model_dir, json;
  std::vector<int> batches = {1, 8, 64, 256};
  std::vector<int> prefills = {512, 2048, 8192};
  std::vector<int> loops;  // --closed-loop: concurrencies of the closed-loop runs
  int input_len = 1024, output_len = 256;  // their requests' prompt and output tokens
  int context = 1024, steps = 32, warmup = 2, repeats = 3, budget = 0, timeline = 0;
  bool cpu = false;
  std::string quantization;  // --quantization (model/quantization.h): "" or "fp8"
  std::string kv_cache_dtype = "auto";  // --kv-cache-dtype: "auto" or "fp8"
  bool async_scheduling = false;        // --async-scheduling: the overlapped engine loop
};

// DESIGN.md section 5: the H200's measured device-to-device copy and bf16 GEMM ceilings.
constexpr double kBandwidth = 4.27e12, kFlops = 796e12;

// The floor (ms per step) of a decode step's kernel group at batch b, context ctx: the bytes it
// must read (weights or KV, bf16) at kBandwidth, or its FLOPs at kFlops, whichever is longer;
// 0 for groups that read only activations.
double GroupFloorMs(const std::string& group, const ModelConfig& c, int b, int ctx) {
  const double L = c.num_hidden_layers, H = c.hidden_size, I = c.intermediate_size;
  const double q = static_cast<double>(c.num_attention_heads) * c.head_dim;
  const double kv = static_cast<double>(c.num_key_value_heads) * c.head_dim;
  double params = 0;  // weight elements read by the group over the step
  if (group == "qkv") params = L * H * (q + 2 * kv);
  else if (group == "o_proj") params = L * q * H;
  else if (group == "gate_up") params = L * H * 2 * I;
  else if (group == "down") params = L * I * H;
  else if (group == "lm_head") params = H * c.vocab_size;
  if (params > 0) return 1e3 * std::max(2 * params / kBandwidth, 2 * params * b / kFlops);
  if (group == "attention") return 1e3 * L * b * static_cast<double>(ctx) * 2 * kv * 2 / kBandwidth;
  return 0;
}

// Prints the "timeline" lines of one prefill of `tokens` tokens (one sequence from position 0): host
// phases and kernel groups (eager), each GEMM group beside its floor (weights once or 2 m n k FLOPs)
// and attention beside its causal FLOPs (4 heads head_dim per visible pair) at the ceilings.
void PrintPrefillTimeline(int tokens, const ModelConfig& c, const StepTimeline& t) {
  const double st = static_cast<double>(std::max<int64_t>(t.steps, 1));
  std::printf("timeline prefill %d: host phases, ms over %lld step(s)\n", tokens,
              static_cast<long long>(t.steps));
  for (const StepTimeline::Span& sp : t.host) {
    std::printf("timeline   host   %-22s %8.3f ms\n", sp.name.c_str(), sp.ms / st);
  }
  std::printf("timeline prefill %d: device kernel groups (eager), ms; floor at %.2f TB/s, %.0f "
              "TFLOP/s\n", tokens, kBandwidth / 1e12, kFlops / 1e12);
  std::printf("timeline   device %-22s %9s %9s %7s %7s\n", "group", "ms", "floor", "%", "count");
  const double attn_flops = 4.0 * c.num_hidden_layers * c.num_attention_heads * c.head_dim *
                            (static_cast<double>(tokens) * (tokens + 1) / 2);
  double sum = 0, floor_sum = 0;
  for (const StepTimeline::Span& sp : t.device) {
    const double ms = sp.ms / st;
    double fl = sp.name == "attention" ? 1e3 * attn_flops / kFlops : GroupFloorMs(sp.name, c, tokens, 0);
    if (sp.name == "lm_head") fl = GroupFloorMs(sp.name, c, 1, 0);  // the last token's row only
    sum += ms;
    floor_sum += fl;
    char fl_text[16] = "-", pct[16] = "-";
    if (fl > 0) std::snprintf(fl_text, sizeof(fl_text), "%.3f", fl);
    if (fl > 0 && ms > 0) std::snprintf(pct, sizeof(pct), "%.1f%%", 100 * fl / ms);
    std::printf("timeline   device %-22s %9.3f %9s %7s %7lld\n", sp.name.c_str(), ms, fl_text, pct,
                static_cast<long long>(sp.count / st));
  }
  std::printf("timeline   device %-22s %9.3f %9.3f %6.1f%%\n", "(groups summed)", sum, floor_sum,
              sum > 0 ? 100 * floor_sum / sum : 0.0);
}

// Prints the "timeline" lines of one decode batch: host phases of the timed (graph) steps, then
// the kernel groups of the timeline steps, eager and from graphs with event nodes, with floors.
void PrintTimeline(int batch, int ctx, const ModelConfig& c, const StepTimeline& host,
                   const StepTimeline& eager, const StepTimeline& graphs) {
  const double hs = static_cast<double>(std::max<int64_t>(host.steps, 1));
  double total = 0;
  std::printf("timeline batch %d ctx %d: host phases, ms/step over %lld timed steps\n", batch, ctx,
              static_cast<long long>(host.steps));
  for (const StepTimeline::Span& sp : host.host) {
    std::printf("timeline   host   %-22s %8.3f ms\n", sp.name.c_str(), sp.ms / hs);
    if (sp.name.rfind("runner.", 0) != 0) total += sp.ms / hs;
  }
  std::printf("timeline   host   %-22s %8.3f ms\n", "(engine phases summed)", total);
  if (eager.device.empty()) {
    std::printf("timeline batch %d ctx %d: no device kernel groups (a host runner)\n", batch, ctx);
    return;
  }
  const double es = static_cast<double>(std::max<int64_t>(eager.steps, 1));
  const double gs = static_cast<double>(std::max<int64_t>(graphs.steps, 1));
  auto graph_ms = [&](const std::string& name) {
    for (const StepTimeline::Span& sp : graphs.device) {
      if (sp.name == name) return sp.ms / gs;
    }
    return -1.0;
  };
  std::printf("timeline batch %d ctx %d: device kernel groups, ms/step: %lld eager steps, %lld graph "
              "steps (event nodes between groups); floor at %.2f TB/s, %.0f TFLOP/s\n", batch, ctx,
              static_cast<long long>(eager.steps), static_cast<long long>(graphs.steps),
              kBandwidth / 1e12, kFlops / 1e12);
  std::printf("timeline   device %-22s %9s %9s %9s %7s %7s\n", "group", "eager", "graph", "floor",
              "%graph", "ev/step");
  double sum_e = 0, sum_g = 0, floor_sum = 0;
  for (const StepTimeline::Span& sp : eager.device) {
    const double ms = sp.ms / es, g = graph_ms(sp.name), fl = GroupFloorMs(sp.name, c, batch, ctx);
    sum_e += ms;
    if (g > 0) sum_g += g;
    floor_sum += fl;
    char fl_text[16] = "-", pct[16] = "-", g_text[16] = "-";
    if (fl > 0) std::snprintf(fl_text, sizeof(fl_text), "%.3f", fl);
    if (g > 0) std::snprintf(g_text, sizeof(g_text), "%.3f", g);
    if (fl > 0 && g > 0) std::snprintf(pct, sizeof(pct), "%.1f%%", 100 * fl / g);
    std::printf("timeline   device %-22s %9.3f %9s %9s %7s %7lld\n", sp.name.c_str(), ms, g_text,
                fl_text, pct, static_cast<long long>(sp.count / es));
  }
  std::printf("timeline   device %-22s %9.3f %9.3f %9.3f %6.1f%%\n", "(groups summed)", sum_e, sum_g,
              floor_sum, sum_g > 0 ? 100 * floor_sum / sum_g : 0.0);
  std::fflush(stdout);
}

class Bench {
 public:
  Bench(Engine& engine, const ModelConfig& config, int timeline_steps)
      : engine_(engine), config_(config), vocab_(config.vocab_size), timeline_steps_(timeline_steps),
        rng_(20261130) {}

  std::vector<int32_t> RandomPrompt(int n) {
    // Ordinary token ids (Qwen's specials start at 151643); any id < vocab is valid.
    std::uniform_int_distribution<int32_t> dist(0, std::min(vocab_, 151643) - 1);
    std::vector<int32_t> ids(n);
    for (int32_t& x : ids) x = dist(rng_);
    return ids;
  }

  // Steps until no request is left (after aborting them all).
  void Drain(const std::vector<std::string>& ids) {
    for (const auto& id : ids) engine_.AbortRequest(id);
    while (engine_.HasUnfinishedRequests()) engine_.Step();
  }

  // Returns false on an error (printed).
  bool Decode(int batch, int context, int steps, int warmup, int budget, std::ostringstream& json) {
    SamplingParams p;
    p.temperature = 0.0f;
    p.ignore_eos = true;
    p.max_tokens = DecodeMaxTokens(batch, context, budget, warmup, steps, timeline_steps_);
    std::vector<std::string> ids;
    for (int i = 0; i < batch; ++i) {
      ids.push_back("d" + std::to_string(batch) + "-" + std::to_string(i) + "-" + std::to_string(serial_++));
      if (Status st = engine_.AddRequest(ids.back(), RandomPrompt(context), p); !st.ok()) {
        std::fprintf(stderr, "decode batch %d: AddRequest: %s\n", batch, st.ToString().c_str());
        Drain(ids);
        return false;
      }
    }
    std::map<std::string, int> produced;
    const double t_prefill = Now();
    int phase_steps = 0;
    while (static_cast<int>(produced.size()) < batch) {
      if (!engine_.HasUnfinishedRequests()) break;
      for (const RequestOutput& o : engine_.Step()) {
        if (o.finish_reason == FinishReason::kError) {
          std::fprintf(stderr, "decode batch %d: request error: %s\n", batch, o.error.c_str());
          Drain(ids);
          return false;
        }
        if (!o.new_token_ids.empty()) produced[o.request_id] += static_cast<int>(o.new_token_ids.size());
      }
      ++phase_steps;
    }
    const double prefill_phase_s = Now() - t_prefill;
    if (static_cast<int>(produced.size()) < batch) {
      std::fprintf(stderr, "decode batch %d: only %zu requests started\n", batch, produced.size());
      Drain(ids);
      return false;
    }
    std::vector<double> times;
    int irregular = 0;
    StepTimeline host_timeline;
    for (int s = 0; s < warmup + steps; ++s) {
      if (s == warmup && timeline_steps_ > 0) engine_.SetStepTimeline(&host_timeline);
      const double t0 = Now();
      std::vector<RequestOutput> outs = engine_.Step();
      const double dt = Now() - t0;
      int ones = 0;
      for (const RequestOutput& o : outs) {
        if (o.finish_reason == FinishReason::kError) {
          std::fprintf(stderr, "decode batch %d: request error: %s\n", batch, o.error.c_str());
          Drain(ids);
          return false;
        }
        ones += o.new_token_ids.size() == 1;
      }
      if (ones != batch || static_cast<int>(outs.size()) != batch) ++irregular;
      if (s >= warmup) times.push_back(dt);
    }
    StepTimeline eager_timeline, graph_timeline;
    if (timeline_steps_ > 0) {
      eager_timeline.device_groups = true;
      graph_timeline.device_groups = graph_timeline.device_groups_in_graphs = true;
      engine_.SetStepTimeline(&eager_timeline);
      for (int s = 0; s < timeline_steps_; ++s) engine_.Step();
      engine_.SetStepTimeline(&graph_timeline);
      engine_.Step();  // captures this batch's timed graph (its times: the eager run before it)
      graph_timeline.Clear();
      for (int s = 0; s < timeline_steps_; ++s) engine_.Step();
      engine_.SetStepTimeline(nullptr);
    }
    Drain(ids);
    double total = 0;
    for (double t : times) total += t;
    const double tok_s = batch * static_cast<double>(times.size()) / total;
    const double med = Median(times);
    std::printf("decode  batch %4d ctx %5d: %3zu steps %8.2f ms/step median (min %.2f, max %.2f) "
                "%10.1f tok/s  [prefill phase %d steps %.2f s%s]\n",
                batch, context, times.size(), med * 1e3,
                *std::min_element(times.begin(), times.end()) * 1e3,
                *std::max_element(times.begin(), times.end()) * 1e3, tok_s, phase_steps,
                prefill_phase_s, irregular ? ", IRREGULAR steps (not every request decoded)" : "");
    std::fflush(stdout);
    if (timeline_steps_ > 0) {
      PrintTimeline(batch, context, config_, host_timeline, eager_timeline, graph_timeline);
    }
    json << (first_ ? "" : ",\n") << "  {\"kind\": \"decode\", \"batch\": " << batch
         << ", \"context\": " << context << ", \"steps\": " << times.size()
         << ", \"total_s\": " << total << ", \"median_step_s\": " << med
         << ", \"tok_s\": " << tok_s << ", \"irregular_steps\": " << irregular << "}";
    first_ = false;
    return true;
  }

  // Closed loop at concurrency c, as `tandem bench` drives a server (scripts/gpu-serve-bench.sh):
  // min(c, 16) warm-up requests, then n = max(8, 2 c) requests of `input` random prompt tokens and
  // `output` tokens (greedy, ignore_eos), at most c unfinished at a time, the next added as one
  // finishes. tok/s = output tokens / wall time from the first AddRequest to the last finish.
  bool ClosedLoop(int c, int input, int output, std::ostringstream& json) {
    SamplingParams p;
    p.temperature = 0.0f;
    p.ignore_eos = true;
    p.max_tokens = output;
    double wall = 0;
    int64_t tokens = 0;
    int steps = 0;
    for (const int n : {std::min(c, 16), std::max(8, 2 * c)}) {  // warm-up, then timed
      std::vector<std::string> ids;
      int added = 0, done = 0;
      tokens = 0;
      steps = 0;
      const double t0 = Now();
      while (done < n) {
        for (; added < n && added - done < c; ++added) {
          ids.push_back("l" + std::to_string(c) + "-" + std::to_string(serial_++));
          if (Status st = engine_.AddRequest(ids.back(), RandomPrompt(input), p); !st.ok()) {
            std::fprintf(stderr, "closed loop c=%d: AddRequest: %s\n", c, st.ToString().c_str());
            Drain(ids);
            return false;
          }
        }
        for (const RequestOutput& o : engine_.Step()) {
          if (o.finish_reason == FinishReason::kError) {
            std::fprintf(stderr, "closed loop c=%d: request error: %s\n", c, o.error.c_str());
            Drain(ids);
            return false;
          }
          tokens += static_cast<int64_t>(o.new_token_ids.size());
          done += o.finished;
        }
        ++steps;
      }
      wall = Now() - t0;
      if (tokens != static_cast<int64_t>(n) * output) {
        std::fprintf(stderr, "closed loop c=%d: %lld output tokens, expected %lld\n", c,
                     static_cast<long long>(tokens), static_cast<long long>(n) * output);
        return false;
      }
    }
    const int n = std::max(8, 2 * c);
    const double tok_s = static_cast<double>(tokens) / wall;
    std::printf("closed loop c %4d: %4d requests of %d + %d tokens in %.2f s, %d steps: %10.1f output tok/s\n",
                c, n, input, output, wall, steps, tok_s);
    std::fflush(stdout);
    json << (first_ ? "" : ",\n") << "  {\"kind\": \"closed_loop\", \"concurrency\": " << c
         << ", \"requests\": " << n << ", \"input\": " << input << ", \"output\": " << output
         << ", \"wall_s\": " << wall << ", \"steps\": " << steps << ", \"tok_s\": " << tok_s << "}";
    first_ = false;
    return true;
  }

  bool Prefill(int tokens, int repeats, std::ostringstream& json) {
    SamplingParams p;
    p.temperature = 0.0f;
    p.ignore_eos = true;
    p.max_tokens = 1;
    std::vector<double> times;
    int max_steps = 0;
    // With --timeline: one more prefill after the timed ones, its kernel groups timed (eager).
    StepTimeline timeline;
    timeline.device_groups = true;
    const int runs = repeats + (timeline_steps_ > 0 ? 1 : 0);
    for (int r = -1; r < runs; ++r) {  // r = -1: untimed warm-up
      if (r == repeats) engine_.SetStepTimeline(&timeline);
      const std::string id = "p" + std::to_string(tokens) + "-" + std::to_string(serial_++);
      if (Status st = engine_.AddRequest(id, RandomPrompt(tokens), p); !st.ok()) {
        std::fprintf(stderr, "prefill %d: AddRequest: %s\n", tokens, st.ToString().c_str());
        return false;
      }
      const double t0 = Now();
      int n = 0;
      bool finished = false;
      while (!finished && engine_.HasUnfinishedRequests()) {
        for (const RequestOutput& o : engine_.Step()) {
          if (o.finish_reason == FinishReason::kError) {
            std::fprintf(stderr, "prefill %d: request error: %s\n", tokens, o.error.c_str());
            Drain({id});
            return false;
          }
          finished = finished || (o.request_id == id && o.finished);
        }
        ++n;
      }
      const double dt = Now() - t0;
      if (r >= 0 && r < repeats) {
        times.push_back(dt);
        max_steps = std::max(max_steps, n);
      }
    }
    engine_.SetStepTimeline(nullptr);
    const double med = Median(times);
    std::printf("prefill %5d tokens: %8.2f ms median of %d (min %.2f) in %d step(s)\n", tokens,
                med * 1e3, repeats, *std::min_element(times.begin(), times.end()) * 1e3, max_steps);
    if (timeline_steps_ > 0) PrintPrefillTimeline(tokens, config_, timeline);
    std::fflush(stdout);
    json << (first_ ? "" : ",\n") << "  {\"kind\": \"prefill\", \"tokens\": " << tokens
         << ", \"repeats\": " << repeats << ", \"median_s\": " << med
         << ", \"min_s\": " << *std::min_element(times.begin(), times.end())
         << ", \"steps\": " << max_steps << "}";
    first_ = false;
    return true;
  }

 private:
  Engine& engine_;
  const ModelConfig& config_;
  int vocab_;
  int timeline_steps_;
  std::mt19937 rng_;
  int serial_ = 0;
  bool first_ = true;
};

int Run(const Args& a) {
  const double t_load = Now();
  CudaRunnerOptions ro;
  ro.quantization = a.quantization;
  ro.kv_cache_dtype = a.kv_cache_dtype;
  auto runner_or = a.cpu ? LoadCpuModelRunner(a.model_dir, a.quantization, a.kv_cache_dtype) : LoadCudaModelRunner(a.model_dir, 0, ro);
  if (!runner_or.ok()) {
    std::fprintf(stderr, "load %s: %s\n", a.model_dir.c_str(), runner_or.status().ToString().c_str());
    return 2;
  }
  const double load_s = Now() - t_load;
  const ModelConfig mc = (*runner_or)->config();
  int max_batch = 1, max_prefill = 0;
  int max_decode = 0, max_loop = 0;
  for (int b : a.batches) max_decode = std::max(max_decode, b);
  for (int c : a.loops) max_loop = std::max(max_loop, c);
  for (int t : a.prefills) max_prefill = std::max(max_prefill, t);
  max_batch = std::max({max_batch, max_decode, max_loop});
  const int budget = a.budget > 0 ? a.budget : std::max(16384, max_prefill);
  // The longest decode request: context + max_tokens of Decode() for the largest batch; the
  // closed loops' requests.
  const int decode_len =
      a.context + DecodeMaxTokens(max_decode, a.context, budget, a.warmup, a.steps, a.timeline);
  const long long decode_blocks = std::max(
      static_cast<long long>(max_decode) * ((decode_len + kBlockSize - 1) / kBlockSize + 1),
      static_cast<long long>(max_loop) * ((a.input_len + a.output_len + kBlockSize - 1) / kBlockSize + 1));
  const long long prefill_blocks = (max_prefill + kBlockSize - 1) / kBlockSize + 2;
  EngineConfig cfg;
  cfg.block_size = kBlockSize;
  cfg.num_kv_blocks = static_cast<int>(std::max(decode_blocks, prefill_blocks) + 64);
  cfg.max_num_seqs = max_batch;
  cfg.max_num_batched_tokens = budget;
  cfg.max_model_len = 0;  // the model's
  cfg.enable_prefix_caching = true;
  cfg.async_scheduling = a.async_scheduling;
  const size_t kv_bytes = (*runner_or)->KVBlockBytes(kBlockSize) * static_cast<size_t>(cfg.num_kv_blocks);
  auto engine_or = Engine::Create(std::move(*runner_or), nullptr, cfg);
  if (!engine_or.ok()) {
    std::fprintf(stderr, "Engine::Create: %s\n", engine_or.status().ToString().c_str());
    return 2;
  }
  Engine& engine = **engine_or;
  const char* graphs = std::getenv("TANDEM_CUDA_GRAPHS");
  std::printf("cuda_engine_bench: %s (%s) loaded in %.1f s: %s, %d layers, hidden %d, heads %d/%d, "
              "vocab %d; engine: %d KV blocks of %d (%.1f GB), max_num_seqs %d, budget %d tokens, "
              "TANDEM_CUDA_GRAPHS=%s\n",
              a.model_dir.c_str(), a.cpu ? "cpu" : "cuda", load_s, mc.architecture.c_str(),
              mc.num_hidden_layers, mc.hidden_size, mc.num_attention_heads, mc.num_key_value_heads,
              mc.vocab_size, cfg.num_kv_blocks, kBlockSize, kv_bytes / 1e9, max_batch, budget,
              graphs ? graphs : "(unset)");
  std::fflush(stdout);
  std::ostringstream json;
  json << "{\"tool\": \"cuda_engine_bench\", \"backend\": \"" << (a.cpu ? "cpu" : "cuda")
       << "\", \"cuda_graphs_env\": \"" << (graphs ? graphs : "") << "\", \"quantization\": \""
       << a.quantization << "\", \"kv_cache_dtype\": \"" << a.kv_cache_dtype
       << "\", \"async_scheduling\": " << (a.async_scheduling ? "true" : "false") << ", \"load_s\": " << load_s
       << ", \"num_kv_blocks\": " << cfg.num_kv_blocks << ", \"budget\": " << budget
       << ", \"results\": [\n";
  Bench bench(engine, mc, a.timeline);
  int errors = 0;
  // Prefill first: the prefill runs also warm the GEMMs up for the decode phases' prefills.
  for (int t : a.prefills) errors += !bench.Prefill(t, a.repeats, json);
  for (int b : a.batches) errors += !bench.Decode(b, a.context, a.steps, a.warmup, budget, json);
  for (int c : a.loops) errors += !bench.ClosedLoop(c, a.input_len, a.output_len, json);
  json << "\n], \"errors\": " << errors << "}\n";
  if (!a.json.empty()) {
    std::ofstream f(a.json);
    f << json.str();
    if (!f) {
      std::fprintf(stderr, "cannot write %s\n", a.json.c_str());
      return 2;
    }
  }
  return errors ? 2 : 0;
}

}  // namespace
}  // namespace tandem

int main(int argc, char** argv) {
  tandem::Args a;
  const char* usage =
      "usage: %s MODEL_DIR [--batches 1,8,64,256] [--context 1024] [--steps 32] [--warmup 2] "
      "[--prefill 512,2048,8192] [--repeats 3] [--budget N] [--timeline N] [--json FILE] [--cpu] "
      "[--quantization fp8] [--kv-cache-dtype fp8] [--async-scheduling] [--closed-loop 1,16,64,256] "
      "[--input-len 1024] [--output-len 256]\n";
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, usage, argv[0]);
        std::exit(2);
      }
      return argv[++i];
    };
    if (arg == "--batches") a.batches = tandem::ParseList(value());
    else if (arg == "--prefill") a.prefills = tandem::ParseList(value());
    else if (arg == "--context") a.context = std::atoi(value().c_str());
    else if (arg == "--steps") a.steps = std::atoi(value().c_str());
    else if (arg == "--warmup") a.warmup = std::atoi(value().c_str());
    else if (arg == "--repeats") a.repeats = std::atoi(value().c_str());
    else if (arg == "--budget") a.budget = std::atoi(value().c_str());
    else if (arg == "--json") a.json = value();
    else if (arg == "--timeline") a.timeline = std::atoi(value().c_str());
    else if (arg == "--cpu") a.cpu = true;
    else if (arg == "--quantization") a.quantization = value();
    else if (arg == "--kv-cache-dtype") a.kv_cache_dtype = value();
    else if (arg == "--async-scheduling") a.async_scheduling = true;
    else if (arg == "--closed-loop") a.loops = tandem::ParseList(value());
    else if (arg == "--input-len") a.input_len = std::atoi(value().c_str());
    else if (arg == "--output-len") a.output_len = std::atoi(value().c_str());
    else if (!arg.empty() && arg[0] != '-' && a.model_dir.empty()) a.model_dir = arg;
    else {
      std::fprintf(stderr, usage, argv[0]);
      return 2;
    }
  }
  if (a.model_dir.empty() || a.steps < 1 || a.repeats < 1 || a.context < 1 || a.timeline < 0 ||
      a.input_len < 1 || a.output_len < 1) {
    std::fprintf(stderr, usage, argv[0]);
    return 2;
  }
  int count = 0;
  if (!a.cpu && (cudaGetDeviceCount(&count) != cudaSuccess || count == 0)) {
    std::printf("cuda_engine_bench: no CUDA device\n");
    return 77;
  }
  return tandem::Run(a);
}
