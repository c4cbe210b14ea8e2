// PrefillRouter / PrefillRoutingEngineClient (router/prefill_router.h): the frontend's prefill
// worker choice over the prefill pool in a private file discovery (instances registered without
// servers: nothing is called on them), with no selector (round-robin) and with a scripted
// WorkerSelector; the decorator sets the hint and reports first and final outputs exactly once.
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <mutex>
#include <thread>

#include <gtest/gtest.h>

#include "discovery/file_discovery.h"
#include "router/prefill_router.h"

namespace tandem::runtime {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// Chooses `next_choice` (an error when it is empty); records what it is told.
class ScriptedSelector final : public WorkerSelector {
 public:
  void SetWorkers(const std::vector<InstanceInfo>& workers) override {
    std::lock_guard<std::mutex> lock(mu);
    seen.clear();
    for (const auto& w : workers) seen.push_back(w.instance_id);
  }
  Result<std::string> Select(const GenerateRequest& request,
                             const std::vector<std::string>& live) override {
    std::lock_guard<std::mutex> lock(mu);
    selected.push_back(request.request_id);
    last_live = live;
    if (next_choice.empty()) return Err(StatusCode::kFailedPrecondition, "no choice");
    return next_choice;
  }
  void OnFirstOutput(const std::string& id) override {
    std::lock_guard<std::mutex> lock(mu);
    first.push_back(id);
  }
  void OnFinished(const std::string& id) override {
    std::lock_guard<std::mutex> lock(mu);
    finished.push_back(id);
  }
  std::mutex mu;
  std::string next_choice;
  std::vector<std::string> seen, selected, last_live, first, finished;
};

// Keeps each submitted request and its callback; the test emits outputs.
class RecordingClient final : public EngineClient {
 public:
  Status Submit(GenerateRequest request, OutputCallback on_output) override {
    if (refuse) return Err(StatusCode::kResourceExhausted, "queue full");
    requests.push_back(request);
    callbacks.push_back(std::move(on_output));
    return Status::Ok();
  }
  void Cancel(const std::string&) override {}
  EngineClientStats Stats() const override { return {}; }
  ServedModelInfo model_info() const override { return {"tiny", 100, 50}; }
  void Emit(size_t i, bool finished) {
    RequestOutput out;
    out.request_id = requests[i].request_id;
    out.new_token_ids = {7};
    out.finished = finished;
    out.finish_reason = finished ? FinishReason::kLength : FinishReason::kNone;
    callbacks[i](out);
  }
  bool refuse = false;
  std::vector<GenerateRequest> requests;
  std::vector<OutputCallback> callbacks;
};

GenerateRequest Request(const std::string& id) {
  GenerateRequest r;
  r.request_id = id;
  r.prompt_token_ids = {1, 2, 3, 4, 5};
  return r;
}

class PrefillRouterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("tandem-prefill-router-" + std::to_string(getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    discovery_ = MakeFileDiscovery({root_.string(), 3000ms, 1000ms});
  }
  void TearDown() override {
    leases_.clear();
    fs::remove_all(root_);
  }
  void Register(const std::string& id, const std::string& model = "tiny") {
    InstanceInfo info;
    info.namespace_name = "pr";
    info.component = kComponentPrefill;
    info.instance_id = id;
    info.endpoint = "127.0.0.1:1";
    info.metadata = {{"model", model}};
    auto lease = discovery_->Register(info);
    ASSERT_TRUE(lease.ok()) << lease.status().ToString();
    leases_.push_back(std::move(lease).value());
  }
  std::shared_ptr<PrefillRouter> MakeRouter(std::shared_ptr<WorkerSelector> selector = nullptr) {
    PrefillRouterOptions o;
    o.namespace_name = "pr";
    o.served_model_name = "tiny";
    o.selector = std::move(selector);
    o.refresh_interval = 50ms;
    return std::make_shared<PrefillRouter>(discovery_, o);
  }

  fs::path root_;
  std::shared_ptr<Discovery> discovery_;
  std::vector<std::unique_ptr<Lease>> leases_;
};

TEST_F(PrefillRouterTest, NoPrefillWorkerNoHint) {
  auto router = MakeRouter();
  bool recorded = true;
  EXPECT_EQ(router->Choose(Request("a"), &recorded), "");
  EXPECT_FALSE(recorded);
  auto inner = std::make_shared<RecordingClient>();
  PrefillRoutingEngineClient client(inner, router);
  ASSERT_TRUE(client.Submit(Request("a"), [](RequestOutput) {}).ok());
  ASSERT_EQ(inner->requests.size(), 1u);
  EXPECT_EQ(inner->requests[0].options.prefill_worker_id, "");
}

TEST_F(PrefillRouterTest, WithoutASelectorTheModelsPoolGoesRoundRobin) {
  Register("pb");
  Register("pa");
  Register("px", "other-model");
  auto router = MakeRouter();
  EXPECT_EQ(router->workers(), (std::vector<std::string>{"pa", "pb"}));
  bool recorded = true;
  std::vector<std::string> got;
  for (int i = 0; i < 4; ++i) got.push_back(router->Choose(Request("r" + std::to_string(i)), &recorded));
  EXPECT_EQ(got, (std::vector<std::string>{"pa", "pb", "pa", "pb"}));
  EXPECT_FALSE(recorded);
  // A joiner is seen by the watch.
  Register("pc");
  const auto end = std::chrono::steady_clock::now() + 10s;
  while (router->workers().size() != 3 && std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(router->workers(), (std::vector<std::string>{"pa", "pb", "pc"}));
}

TEST_F(PrefillRouterTest, TheSelectorsChoiceIsTheHintAndItsPredictionEndsOnce) {
  Register("pa");
  Register("pb");
  auto selector = std::make_shared<ScriptedSelector>();
  selector->next_choice = "pb";
  auto router = MakeRouter(selector);
  {
    std::lock_guard<std::mutex> lock(selector->mu);
    EXPECT_EQ(selector->seen, (std::vector<std::string>{"pa", "pb"}));
  }
  auto inner = std::make_shared<RecordingClient>();
  PrefillRoutingEngineClient client(inner, router);
  ASSERT_TRUE(client.Submit(Request("a"), [](RequestOutput) {}).ok());
  ASSERT_EQ(inner->requests.size(), 1u);
  EXPECT_EQ(inner->requests[0].options.prefill_worker_id, "pb");
  EXPECT_EQ(selector->last_live, (std::vector<std::string>{"pa", "pb"}));
  // The same id again while "a" is in flight: round-robin, the selector is not asked.
  ASSERT_TRUE(client.Submit(Request("a"), [](RequestOutput) {}).ok());
  EXPECT_EQ(selector->selected.size(), 1u);
  EXPECT_EQ(inner->requests[1].options.prefill_worker_id, "pa");
  inner->Emit(0, false);
  inner->Emit(0, false);
  inner->Emit(0, true);
  inner->Emit(1, true);  // the duplicate's end does not end "a"'s prediction twice
  EXPECT_EQ(selector->first, (std::vector<std::string>{"a"}));
  EXPECT_EQ(selector->finished, (std::vector<std::string>{"a"}));
  // A hint the request already carries is kept; nothing is asked.
  GenerateRequest preset = Request("b");
  preset.options.prefill_worker_id = "pa";
  ASSERT_TRUE(client.Submit(preset, [](RequestOutput) {}).ok());
  EXPECT_EQ(inner->requests[2].options.prefill_worker_id, "pa");
  EXPECT_EQ(selector->selected.size(), 1u);
  // A refused Submit ends the prediction at once.
  inner->refuse = true;
  EXPECT_FALSE(client.Submit(Request("c"), [](RequestOutput) {}).ok());
  EXPECT_EQ(selector->finished, (std::vector<std::string>{"a", "c"}));
}

TEST_F(PrefillRouterTest, ASelectorErrorOrAChoiceOutsideThePoolFallsBackToRoundRobin) {
  Register("pa");
  Register("pb");
  auto selector = std::make_shared<ScriptedSelector>();
  auto router = MakeRouter(selector);
  bool recorded = true;
  selector->next_choice = "";  // an error
  EXPECT_EQ(router->Choose(Request("x"), &recorded), "pa");
  EXPECT_FALSE(recorded);
  selector->next_choice = "gone";
  EXPECT_EQ(router->Choose(Request("y"), &recorded), "pb");
  EXPECT_FALSE(recorded);
  EXPECT_EQ(selector->finished, (std::vector<std::string>{"x", "y"}));  // predictions freed
  selector->next_choice = "pb";
  EXPECT_EQ(router->Choose(Request("z"), &recorded), "pb");
  EXPECT_TRUE(recorded);
}

}  // namespace
}  // namespace tandem::runtime
