// StepTimeline: where the time of engine steps goes (issue 23's per-step timeline), summed over
// the steps run while it is attached (Engine::SetStepTimeline, ModelRunner::SetStepTimeline).
//
// host:   wall-clock phases on the thread calling Engine::Step, in milliseconds (steady_clock):
//         the engine's "schedule", "batch" (building the ForwardBatch), "execute" (the runner's
//         whole Execute), "post" (host sampling, detokenizing, stop checks, outputs), and inside
//         "execute" the CUDA runner's "runner.inputs" (validation, step metadata up), "runner.launch"
//         (graph replay or eager enqueue of the forward pass), "runner.prepare_picks" (the
//         engine's hook: structured-output masks), "runner.sampling" (the pick kernels enqueued),
//         "runner.wait" (cudaStreamSynchronize: the host idles while the device finishes) and
//         "runner.unpack".
// device: with device_groups set, GPU time of each kernel group in milliseconds, from CUDA events
//         recorded between groups and summed over the step's layers: "embedding", "norm"
//         (rms_norm with the residual add), "qkv", "qk_norm_rope_cache", "attention", "o_proj",
//         "gate_up", "silu_mul", "down", "lm_head" (the final norm's row gather included),
//         "sampling" (argmax / top-k / sampling kernels) and "copy_back". The runner then
//         launches eagerly, so such steps' host phases are an eager step's, and a group's time
//         also holds the idle gap before it when the host launched it late; with
//         device_groups_in_graphs as well, padded decode steps replay CUDA graphs of their own,
//         captured with an event record node between the groups (cudaEventRecordExternal): a
//         graph step's times, except that the event nodes stand between kernels that would
//         otherwise start programmatically (PDL) and keep them from overlapping.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tandem {

struct StepTimeline {
  struct Span {
    std::string name;
    double ms = 0;      // summed over the steps
    int64_t count = 0;  // how many times it was added (events: once per group per layer)
  };
  std::vector<Span> host;
  std::vector<Span> device;
  bool device_groups = false;  // set by the caller: the runner records per-group device time
  bool device_groups_in_graphs = false;  // with device_groups: decode steps from graphs
  int64_t steps = 0;           // Engine::Step calls that ran a forward pass

  static void Add(std::vector<Span>& spans, std::string_view name, double ms) {
    for (Span& s : spans) {
      if (s.name == name) {
        s.ms += ms;
        ++s.count;
        return;
      }
    }
    spans.push_back(Span{std::string(name), ms, 1});
  }
  void AddHost(std::string_view name, double ms) { Add(host, name, ms); }
  void AddDevice(std::string_view name, double ms) { Add(device, name, ms); }
  void Clear() {
    host.clear();
    device.clear();
    steps = 0;
  }
};

// Adds the wall-clock milliseconds since the previous Lap (or construction) to a host phase of
// `timeline`; does nothing when timeline is null.
class PhaseClock {
 public:
  explicit PhaseClock(StepTimeline* timeline) : timeline_(timeline) {
    if (timeline_) last_ = std::chrono::steady_clock::now();
  }
  void Lap(std::string_view phase) {
    if (!timeline_) return;
    const auto now = std::chrono::steady_clock::now();
    timeline_->AddHost(phase, std::chrono::duration<double, std::milli>(now - last_).count());
    last_ = now;
  }

 private:
  StepTimeline* timeline_;
  std::chrono::steady_clock::time_point last_{};
};

}  // namespace tandem
