// The OpenAI service behind the real HttpServer, driven by curl (scripted engine).
#include <mutex>
#include <string>

#include "frontend/http_server.h"
#include "http_test_util.h"
#include "openai_test_util.h"

namespace tandem::testing {
namespace {

class OpenAIHttpTest : public OpenAITest {
 protected:
  void Serve(OpenAIServiceOptions options = {}) {
    Make(options);
    http::HttpServer::Options so;
    so.port = 0;
    server = std::make_unique<http::HttpServer>(so);
    service->Register([this](std::string method, std::string path, http::Handler h) {
      server->Route(std::move(method), std::move(path), std::move(h));
    });
    service->SetReady(true);
    ASSERT_TRUE(server->Start().ok());
    url = "http://127.0.0.1:" + std::to_string(server->port());
  }
  void TearDown() override {
    if (server) server->Stop();
    OpenAITest::TearDown();
  }
  static std::string Quote(const std::string& s) {
    std::string q = "'";
    for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return q + "'";
  }
  http::testing::CurlResult PostJson(const std::string& path, const json& body,
                                     const std::string& extra = "") {
    return http::testing::Curl("-N -H 'Content-Type: application/json' " + extra + " -d " +
                               Quote(body.dump()) + " " + url + path);
  }

  std::unique_ptr<http::HttpServer> server;
  std::string url;
};

TEST_F(OpenAIHttpTest, ChatStreamAndNonStreamOverHttp) {
  Serve();
  json req{{"messages", UserMessages("hi")}, {"max_tokens", 6}};
  auto full = PostJson("/v1/chat/completions", req);
  ASSERT_EQ(full.code, 200) << full.body;
  std::string text = json::parse(full.body)["choices"][0]["message"]["content"];
  req["stream"] = true;
  auto stream = PostJson("/v1/chat/completions", req);
  ASSERT_EQ(stream.code, 200);
  FakeWriter parsed(ioc.get_executor());
  parsed.body = stream.body;
  bool done = false;
  std::string joined;
  for (const json& e : parsed.Events(&done))
    if (e["choices"][0]["delta"].contains("content"))
      joined += e["choices"][0]["delta"]["content"].get<std::string>();
  EXPECT_TRUE(done);
  EXPECT_EQ(joined, text);

  EXPECT_EQ(http::testing::Curl(url + "/health").code, 200);
  auto metrics = http::testing::Curl(url + "/metrics");
  EXPECT_NE(metrics.body.find("tandem_requests_total"), std::string::npos);
  EXPECT_EQ(PostJson("/v1/completions", json{{"prompt", "x"}, {"model", "other"}}).code, 404);
  EXPECT_EQ(http::testing::Curl("-d '{' " + url + "/v1/completions").code, 400);
}

TEST_F(OpenAIHttpTest, ApiKeyOverHttp) {
  OpenAIServiceOptions o;
  o.api_key = "k1";
  Serve(o);
  json req{{"prompt", "hi"}, {"max_tokens", 2}};
  EXPECT_EQ(PostJson("/v1/completions", req).code, 401);
  EXPECT_EQ(PostJson("/v1/completions", req, "-H 'Authorization: Bearer k1'").code, 200);
  EXPECT_EQ(http::testing::Curl(url + "/health").code, 200);
}

TEST_F(OpenAIHttpTest, ClientGoneCancels) {
  Serve();
  engine->script.hang = true;
  engine->script.delay = std::chrono::milliseconds(5);
  for (bool stream : {true, false}) {
    size_t before = engine->submitted().size();
    auto r = PostJson("/v1/completions", json{{"prompt", "hi"}, {"stream", stream}}, "-m 1");
    if (!stream) {
      EXPECT_NE(r.code, 200) << "curl should have given up";
    }
    ASSERT_EQ(engine->submitted().size(), before + 1);
    std::string id = engine->submitted().back().request_id;
    EXPECT_TRUE(http::testing::WaitFor(
        [&] {
          auto c = engine->cancelled();
          return std::find(c.begin(), c.end(), id) != c.end();
        },
        std::chrono::milliseconds(3000)))
        << id << (stream ? " stream" : " non-stream");
  }
}

// Issue 21: with a health report, /health names the pools and why it is unhealthy; without one
// (tandem run) it answers from SetReady as before.
TEST_F(OpenAIHttpTest, HealthNamesTheEmptyPool) {
  Serve();
  auto plain = http::testing::Curl(url + "/health");
  EXPECT_EQ(plain.code, 200);
  EXPECT_EQ(json::parse(plain.body), json({{"status", "ok"}}));
  std::mutex mu;
  HealthReport report;
  report.healthy = false;
  report.reason = "no live decode worker";
  report.pools = {{"decode", 0}, {"prefill", 1}};
  service->SetHealthReport([&] {
    std::lock_guard<std::mutex> lock(mu);
    return report;
  });
  auto down = http::testing::Curl(url + "/health");
  EXPECT_EQ(down.code, 503);
  EXPECT_EQ(json::parse(down.body),
            json::parse(R"({"status":"unhealthy","reason":"no live decode worker","pools":{"decode":0,"prefill":1}})"))
      << down.body;
  {
    std::lock_guard<std::mutex> lock(mu);
    report = HealthReport{true, "", {{"decode", 2}, {"prefill", 1}}};
  }
  auto up = http::testing::Curl(url + "/health");
  EXPECT_EQ(up.code, 200);
  EXPECT_EQ(json::parse(up.body), json::parse(R"({"status":"ok","pools":{"decode":2,"prefill":1}})")) << up.body;
  service->SetHealthReport(nullptr);
  service->SetReady(false);
  auto loading = http::testing::Curl(url + "/health");
  EXPECT_EQ(loading.code, 503);
  EXPECT_EQ(json::parse(loading.body), json({{"status", "loading"}}));
}

}  // namespace
}  // namespace tandem::testing
