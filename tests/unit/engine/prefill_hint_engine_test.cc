// RequestOptions::prefill_worker_id (the frontend router's prefill worker choice) reaches the
// decode engine's RemotePrefillTask unchanged, and changes nothing else: a prompt whose uncached
// part is at or under max_local_prefill_tokens is still prefilled locally.
#include <memory>

#include <gtest/gtest.h>

#include "engine_test_util.h"
#include "fake_model_runner.h"

namespace tandem {
namespace {

using testing::FakeModelRunner;
using testing::Greedy;

std::unique_ptr<Engine> MakeDecode(int max_local) {
  EngineConfig c;
  c.block_size = 4;
  c.num_kv_blocks = 128;
  c.max_local_prefill_tokens = max_local;
  auto e = Engine::Create(std::make_unique<FakeModelRunner>(), nullptr, c);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return std::move(e).value();
}

std::vector<int32_t> Prompt(int n, int salt) {
  std::vector<int32_t> v(n);
  for (int i = 0; i < n; ++i) v[i] = (i * 11 + salt * 5) % 300 + 1;
  return v;
}

RequestOptions Remote(std::string hint) {
  RequestOptions o;
  o.allow_remote_prefill = true;
  o.prefill_worker_id = std::move(hint);
  return o;
}

TEST(PrefillHintEngine, TheHintReachesTheRemotePrefillTask) {
  auto decode = MakeDecode(/*max_local=*/8);
  ASSERT_TRUE(decode->AddRequest("hinted", Prompt(30, 1), Greedy(4), Remote("prefill-b")).ok());
  ASSERT_TRUE(decode->AddRequest("plain", Prompt(30, 2), Greedy(4), Remote("")).ok());
  decode->Step();
  auto tasks = decode->TakeRemotePrefillTasks();
  ASSERT_EQ(tasks.size(), 2u);
  for (const RemotePrefillTask& t : tasks) {
    EXPECT_EQ(t.prefill_worker_id, t.request_id == "hinted" ? "prefill-b" : "") << t.request_id;
  }
  decode->AbortRequest("hinted");
  decode->AbortRequest("plain");
  decode->Step();
  EXPECT_EQ(decode->Stats().num_kv_blocks_used, 0);
}

TEST(PrefillHintEngine, AShortPromptWithAHintIsStillPrefilledLocally) {
  auto decode = MakeDecode(/*max_local=*/8);
  ASSERT_TRUE(decode->AddRequest("short", Prompt(6, 3), Greedy(3), Remote("prefill-a")).ok());
  int guard = 0;
  bool finished = false;
  while (!finished && ++guard < 100) {
    for (const RequestOutput& out : decode->Step()) finished = finished || out.finished;
    EXPECT_TRUE(decode->TakeRemotePrefillTasks().empty());
  }
  EXPECT_TRUE(finished);
}

}  // namespace
}  // namespace tandem
