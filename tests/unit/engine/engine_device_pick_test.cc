// The engine over a runner that samples on its device (ModelRunner::SamplesOnDevice): every
// sampling row is a kPick with a PickSpec (the engine's one uniform draw, the penalty ids), and
// the tokens and log-probabilities must be exactly those of the host-sampling route, seeded.
// The device is stood in for by the base Execute (PickToken: cpu::SampleWithUniform), which is
// what the GPU pick is checked against in cuda_op_check / cuda_runner_check.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/engine.h"
#include "engine_test_util.h"
#include "fake_model_runner.h"

namespace tandem {
namespace {

using testing::Collected;
using testing::FakeModelRunner;
using testing::RunToCompletion;

// What a DevicePickRunner saw; owned by the test, as the engine destroys its runner.
struct PickCounts {
  int num_picks = 0, num_specs = 0, num_penalized = 0;
};

class DevicePickRunner : public FakeModelRunner {
 public:
  explicit DevicePickRunner(PickCounts* counts) : FakeModelRunner(64, 4096), counts_(*counts) {}
  bool SamplesOnDevice() const override { return true; }
  Status Execute(const ForwardBatch& batch, ForwardOutput* out) override {
    for (const SequenceSlice& s : batch.seqs) {
      EXPECT_NE(s.logits, SequenceSlice::Logits::kLast);  // no row leaves the "device"
      if (s.logits != SequenceSlice::Logits::kPick) continue;
      ++counts_.num_picks;
      if (s.pick != nullptr) ++counts_.num_specs;
      if (s.pick != nullptr && s.pick->has_penalties()) {
        ++counts_.num_penalized;
        // Unique ids in the vocabulary.
        std::map<int32_t, int> seen;
        for (const auto& e : s.pick->penalties) {
          EXPECT_GE(e.token_id, 0);
          EXPECT_LT(e.token_id, 64);
          EXPECT_EQ(++seen[e.token_id], 1);
        }
      }
    }
    return ModelRunner::Execute(batch, out);
  }
  PickCounts& counts_;
};

EngineConfig Config() {
  EngineConfig c;
  c.block_size = 4;
  c.num_kv_blocks = 512;
  c.max_num_batched_tokens = 9;  // prompts chunked: picks only on the last chunk
  return c;
}

using Requests = std::vector<std::pair<std::string, SamplingParams>>;

std::map<std::string, Collected> RunRequests(std::unique_ptr<ModelRunner> runner,
                                             const Requests& reqs, bool async_scheduling = false) {
  EngineConfig config = Config();
  config.async_scheduling = async_scheduling;
  auto e = Engine::Create(std::move(runner), nullptr, config);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  for (size_t i = 0; i < reqs.size(); ++i) {
    std::vector<int32_t> prompt(5 + 3 * i);
    for (size_t j = 0; j < prompt.size(); ++j) {
      prompt[j] = static_cast<int32_t>((j * 11 + i * 5 + 2) % 64);
    }
    EXPECT_TRUE((*e)->AddRequest(reqs[i].first, prompt, reqs[i].second).ok());
  }
  return RunToCompletion(**e);
}

TEST(EngineDevicePick, SeededOutputsEqualTheHostSamplingRoute) {
  auto params = [](float t, uint64_t seed) {
    SamplingParams p;
    p.temperature = t;
    p.seed = seed;
    p.max_tokens = 12;
    p.ignore_eos = true;
    p.logprobs = 2;
    return p;
  };
  SamplingParams plain = params(1.0f, 7);
  SamplingParams nucleus = params(0.8f, 8);
  nucleus.top_p = 0.7f;
  nucleus.top_k = 10;
  SamplingParams minp = params(1.2f, 9);
  minp.min_p = 0.05f;
  minp.frequency_penalty = 0.6f;
  minp.presence_penalty = 0.3f;
  SamplingParams greedy_pen = params(0.0f, 10);
  greedy_pen.repetition_penalty = 1.4f;
  SamplingParams greedy = params(0.0f, 11);
  const Requests reqs = {
      {"plain", plain}, {"nucleus", nucleus}, {"minp", minp}, {"greedy_pen", greedy_pen},
      {"greedy", greedy}};
  auto host = RunRequests(std::make_unique<FakeModelRunner>(64, 4096), reqs);
  // Counted outside the runner: RunRequests' engine destroys it before returning (reading its
  // members afterwards was a heap-use-after-free, found by scripts/sanitize.sh tsan).
  PickCounts counts;
  auto device_runner = std::make_unique<DevicePickRunner>(&counts);
  auto got = RunRequests(std::move(device_runner), reqs);
  for (const auto& [id, p] : reqs) {
    ASSERT_EQ(got[id].token_ids.size(), 12u) << id;
    EXPECT_EQ(got[id].token_ids, host[id].token_ids) << id;
    ASSERT_EQ(got[id].logprobs.size(), host[id].logprobs.size()) << id;
    for (size_t i = 0; i < host[id].logprobs.size(); ++i) {
      EXPECT_EQ(got[id].logprobs[i].token_id, host[id].logprobs[i].token_id) << id << i;
      EXPECT_EQ(got[id].logprobs[i].logprob, host[id].logprobs[i].logprob) << id << i;
      EXPECT_EQ(got[id].logprobs[i].top, host[id].logprobs[i].top) << id << i;
    }
  }
  EXPECT_EQ(counts.num_picks, 5 * 12);
  EXPECT_EQ(counts.num_specs, 4 * 12);       // all but the plain greedy row
  EXPECT_EQ(counts.num_penalized, 2 * 12);   // minp and greedy_pen

  // The overlapped loop over a device runner, whose hand-offs poll instead of sleeping
  // (forward_worker.h): the same tokens and log-probabilities.
  PickCounts overlap_counts;
  auto overlapped = RunRequests(std::make_unique<DevicePickRunner>(&overlap_counts), reqs,
                                /*async_scheduling=*/true);
  EXPECT_EQ(overlap_counts.num_picks, counts.num_picks);  // the device route, as above
  EXPECT_EQ(overlap_counts.num_specs, counts.num_specs);
  for (const auto& [id, p] : reqs) {
    EXPECT_EQ(overlapped[id].token_ids, host[id].token_ids) << id;
    ASSERT_EQ(overlapped[id].logprobs.size(), host[id].logprobs.size()) << id;
    for (size_t i = 0; i < host[id].logprobs.size(); ++i) {
      EXPECT_EQ(overlapped[id].logprobs[i].logprob, host[id].logprobs[i].logprob) << id << i;
    }
  }
}

}  // namespace
}  // namespace tandem
