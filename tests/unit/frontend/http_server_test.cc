// HttpServer tests: a server on 127.0.0.1:<ephemeral> with test handlers, driven by a Beast client
// (every operation bounded by a 5 s stream timeout) and by real curl.
#include "frontend/http_server.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "http_test_util.h"

namespace tandem::http {
namespace {

using namespace tandem::http::testing;

// What handlers saw, for the assertions.
struct Observed {
  std::atomic<int64_t> second_chunk_write_ns{0};
  std::atomic<bool> wait_started{false};
  std::atomic<int64_t> disconnect_ns{0};
  std::atomic<bool> gone_after_disconnect{false};
  std::atomic<bool> stubborn_started{false};
  std::atomic<int> sleep_disconnects{0};
};

asio::awaitable<void> Sleep(ResponseWriter& w, std::chrono::milliseconds d) {
  asio::steady_timer timer(w.executor(), d);
  co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
}

class HttpServerTest : public ::testing::Test {
 protected:
  void StartServer(HttpServer::Options options = {}) {
    options.port = 0;
    server_ = std::make_unique<HttpServer>(options);
    AddRoutes(*server_, obs_);
    Status st = server_->Start();
    ASSERT_TRUE(st.ok()) << st.ToString();
    port_ = server_->port();
    ASSERT_GT(port_, 0);
  }
  void TearDown() override {
    if (server_) server_->Stop();
  }
  std::string Url(const std::string& path) {
    return "'http://127.0.0.1:" + std::to_string(port_) + path + "'";
  }

  static void AddRoutes(HttpServer& s, Observed& obs) {
    s.Route("GET", "/hello", [](const Request& r, ResponseWriter& w) -> asio::awaitable<void> {
      // (GCC 12 miscompiles braced string-literal maps inside co_await: build it first.)
      std::map<std::string, std::string> headers = {{"x-test", "1"}};
      co_await w.WriteFull(200, "text/plain", "hello", std::move(headers));
    });
    s.Route("POST", "/echo", [](const Request& r, ResponseWriter& w) -> asio::awaitable<void> {
      std::map<std::string, std::string> headers = {{"x-method", r.method},
                                                    {"x-target", r.target},
                                                    {"x-query", r.query},
                                                    {"x-content-type", r.Header("content-type")}};
      co_await w.WriteFull(200, "application/json", r.body, std::move(headers));
    });
    s.Route("POST", "/sleep", [&obs](const Request&, ResponseWriter& w) -> asio::awaitable<void> {
      w.OnDisconnect([&obs] { ++obs.sleep_disconnects; });
      co_await Sleep(w, 100ms);
      co_await w.WriteFull(200, "text/plain", "slept");
    });
    s.Route("GET", "/stream", [&obs](const Request&, ResponseWriter& w) -> asio::awaitable<void> {
      std::map<std::string, std::string> headers = {{"cache-control", "no-cache"}};
      co_await w.StartStream(200, "text/event-stream", std::move(headers));
      co_await w.WriteChunk("data: first\n\n");
      co_await Sleep(w, 200ms);
      obs.second_chunk_write_ns = NowNs();
      co_await w.WriteChunk("data: second\n\n");
      co_await w.EndStream();
    });
    s.Route("GET", "/wait", [&obs](const Request&, ResponseWriter& w) -> asio::awaitable<void> {
      asio::steady_timer timer(w.executor(), 10s);
      w.OnDisconnect([&obs, &timer, &w] {
        obs.gone_after_disconnect = w.client_gone();
        obs.disconnect_ns = NowNs();
        timer.cancel();
      });
      obs.wait_started = true;
      co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
      co_await w.WriteFull(200, "text/plain", "waited");
    });
    s.Route("GET", "/stubborn", [&obs](const Request&, ResponseWriter& w) -> asio::awaitable<void> {
      obs.stubborn_started = true;
      co_await Sleep(w, 30s);  // ignores disconnects
    });
    s.Route("GET", "/throw", [](const Request&, ResponseWriter&) -> asio::awaitable<void> {
      throw std::runtime_error("handler failure");
      co_return;
    });
    s.Route("GET", "/nothing", [](const Request&, ResponseWriter&) -> asio::awaitable<void> {
      co_return;
    });
  }

  Observed obs_;
  std::unique_ptr<HttpServer> server_;
  int port_ = 0;
};

nlohmann::json ErrorOf(const std::string& body) {
  auto j = nlohmann::json::parse(body, nullptr, false);
  return j.is_object() && j.contains("error") ? j["error"] : nlohmann::json();
}

TEST_F(HttpServerTest, RoutesGetAndPost) {
  StartServer();
  TestClient c(port_);
  ASSERT_TRUE(c.connected());
  auto r = c.Send("GET", "/hello?a=b");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->result_int(), 200);
  EXPECT_EQ(r->body(), "hello");
  EXPECT_EQ((*r)["x-test"], "1");
  r = c.Send("POST", "/echo?x=1&y=2", R"({"k":"v"})");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->result_int(), 200);
  EXPECT_EQ(r->body(), R"({"k":"v"})");
  EXPECT_EQ((*r)["x-method"], "POST");
  EXPECT_EQ((*r)["x-target"], "/echo");
  EXPECT_EQ((*r)["x-query"], "x=1&y=2");
  EXPECT_EQ((*r)["x-content-type"], "application/json");
  EXPECT_EQ((*r)[bhttp::field::content_type], "application/json");

  CurlResult cr = Curl(Url("/hello"));
  EXPECT_EQ(cr.code, 200);
  EXPECT_EQ(cr.body, "hello");
  cr = Curl("-X POST -H 'Content-Type: application/json' --data-binary '{\"a\":1}' " + Url("/echo"));
  EXPECT_EQ(cr.code, 200);
  EXPECT_EQ(cr.body, "{\"a\":1}");
}

TEST_F(HttpServerTest, UnknownPathIs404AndWrongMethodIs405) {
  StartServer();
  TestClient c(port_);
  auto r = c.Send("GET", "/nope");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->result_int(), 404);
  EXPECT_EQ((*r)[bhttp::field::content_type], "application/json");
  auto e = ErrorOf(r->body());
  ASSERT_TRUE(e.is_object()) << r->body();
  EXPECT_NE(e["message"].get<std::string>().find("/nope"), std::string::npos);
  EXPECT_EQ(e["type"], "invalid_request_error");
  EXPECT_TRUE(e["param"].is_null());
  EXPECT_TRUE(e["code"].is_null());

  r = c.Send("GET", "/echo");  // same connection: a 404 keeps it open
  ASSERT_TRUE(r);
  EXPECT_EQ(r->result_int(), 405);
  EXPECT_EQ((*r)[bhttp::field::allow], "POST");
  e = ErrorOf(r->body());
  ASSERT_TRUE(e.is_object()) << r->body();
  EXPECT_EQ(e["type"], "invalid_request_error");

  CurlResult cr = Curl(Url("/v1/missing"));
  EXPECT_EQ(cr.code, 404);
  EXPECT_TRUE(ErrorOf(cr.body).is_object()) << cr.body;
  cr = Curl("-X DELETE " + Url("/hello"));
  EXPECT_EQ(cr.code, 405);
  EXPECT_TRUE(ErrorOf(cr.body).is_object()) << cr.body;
}

// HEAD on a GET route: the GET handler's status and headers (Content-Length of its body), no body;
// the connection stays usable. HEAD on a POST-only route: 405, and Allow lists HEAD beside GET.
TEST_F(HttpServerTest, HeadIsGetWithoutTheBody) {
  StartServer();
  TestClient c(port_);
  ASSERT_TRUE(c.WriteRaw("HEAD /hello HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
                         "GET /hello HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"));
  std::string raw = c.ReadToEof();
  ASSERT_EQ(raw.rfind("HTTP/1.1 200", 0), 0u) << raw;
  size_t end = raw.find("\r\n\r\n");
  ASSERT_NE(end, std::string::npos) << raw;
  std::string head = raw.substr(0, end);
  EXPECT_NE(head.find("Content-Length: 5"), std::string::npos) << raw;
  EXPECT_NE(head.find("x-test: 1"), std::string::npos) << raw;
  // Right after the HEAD response's headers comes the GET's response, not a body.
  EXPECT_EQ(raw.compare(end + 4, 12, "HTTP/1.1 200"), 0) << raw;
  EXPECT_EQ(raw.substr(raw.size() - 5), "hello") << raw;

  TestClient c2(port_);
  ASSERT_TRUE(c2.WriteRaw("HEAD /stream HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"));
  raw = c2.ReadToEof();
  EXPECT_EQ(raw.rfind("HTTP/1.1 200", 0), 0u) << raw;
  EXPECT_EQ(raw.find("data:"), std::string::npos) << raw;

  TestClient c3(port_);
  ASSERT_TRUE(c3.WriteRaw("HEAD /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"));
  raw = c3.ReadToEof();
  EXPECT_EQ(raw.rfind("HTTP/1.1 405", 0), 0u) << raw;
  EXPECT_EQ(raw.size(), raw.find("\r\n\r\n") + 4) << "a body after HEAD: " << raw;
  TestClient c4(port_);
  auto r = c4.Send("DELETE", "/hello");
  ASSERT_TRUE(r);
  EXPECT_EQ((*r)[bhttp::field::allow], "GET, HEAD");

  CurlResult cr = Curl("-I " + Url("/hello"));
  EXPECT_EQ(cr.code, 200);
}

// A compressed body is not read as plain JSON: 415; a transfer coding other than chunked: 501.
TEST_F(HttpServerTest, UnsupportedEncodingsAreRefused) {
  StartServer();
  const std::string body = R"({"a":1})";
  auto post = [&](const std::string& headers, const std::string& payload) {
    TestClient c(port_);
    EXPECT_TRUE(c.WriteRaw("POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                           "application/json\r\n" + headers + "\r\n" + payload));
    std::string raw = c.ReadToEof();
    size_t end = raw.find("\r\n\r\n");
    int status = raw.size() > 12 ? std::atoi(raw.c_str() + 9) : 0;
    return std::make_pair(status, end == std::string::npos ? std::string() : raw.substr(end + 4));
  };
  const std::string len = "Content-Length: " + std::to_string(body.size()) + "\r\n";
  auto [status, reply] = post("Content-Encoding: gzip\r\n" + len, body);
  EXPECT_EQ(status, 415) << reply;
  auto e = ErrorOf(reply);
  ASSERT_TRUE(e.is_object()) << reply;
  EXPECT_EQ(e["type"], "invalid_request_error");
  EXPECT_NE(e["message"].get<std::string>().find("gzip"), std::string::npos) << reply;
  std::tie(status, reply) = post("Content-Encoding: identity\r\n" + len, body);
  EXPECT_EQ(status, 200) << reply;
  EXPECT_EQ(reply, body);

  const std::string chunked = "7\r\n" + body + "\r\n0\r\n\r\n";
  std::tie(status, reply) = post("Transfer-Encoding: gzip, chunked\r\n", chunked);
  EXPECT_EQ(status, 501) << reply;
  EXPECT_TRUE(ErrorOf(reply).is_object()) << reply;
  std::tie(status, reply) = post("Transfer-Encoding: chunked\r\n", chunked);
  EXPECT_EQ(status, 200) << reply;
  EXPECT_EQ(reply, body);

  CurlResult cr = Curl("-H 'Content-Encoding: br' --data-binary '{}' " + Url("/echo"));
  EXPECT_EQ(cr.code, 415);
}

TEST_F(HttpServerTest, OversizedBodyIs413AndServerKeepsServing) {
  HttpServer::Options o;
  o.max_body_bytes = 1024;
  StartServer(o);
  {
    TestClient c(port_);
    auto r = c.Send("POST", "/echo", std::string(1024, 'a'));  // exactly the limit: fine
    ASSERT_TRUE(r);
    EXPECT_EQ(r->result_int(), 200);
    r = c.Send("POST", "/echo", std::string(64 * 1024, 'x'));
    ASSERT_TRUE(r);
    EXPECT_EQ(r->result_int(), 413);
    EXPECT_FALSE(r->keep_alive());
    auto e = ErrorOf(r->body());
    ASSERT_TRUE(e.is_object()) << r->body();
    EXPECT_EQ(e["type"], "invalid_request_error");
  }
  {  // chunked request body over the limit
    TestClient c(port_);
    std::string chunk(2000, 'y');
    ASSERT_TRUE(c.WriteRaw("POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" +
                           fmt::format("{:x}\r\n", chunk.size()) + chunk + "\r\n0\r\n\r\n"));
    std::string raw = c.ReadToEof();
    EXPECT_EQ(raw.rfind("HTTP/1.1 413", 0), 0u) << raw.substr(0, 200);
  }
  // curl sends "Expect: 100-continue" for a body this size: answered 413 before the body.
  std::string path = ::testing::TempDir() + "/http_server_test_body.txt";
  {
    std::unique_ptr<FILE, int (*)(FILE*)> f(fopen(path.c_str(), "wb"), fclose);
    ASSERT_TRUE(f);
    std::string big(100000, 'x');
    fwrite(big.data(), 1, big.size(), f.get());
  }
  CurlResult cr = Curl("-X POST --data-binary @'" + path + "' " + Url("/echo"));
  std::remove(path.c_str());
  EXPECT_EQ(cr.code, 413) << cr.body;
  EXPECT_TRUE(ErrorOf(cr.body).is_object()) << cr.body;
  TestClient after(port_);
  auto r = after.Send("GET", "/hello");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->result_int(), 200);
}

TEST_F(HttpServerTest, MalformedRequestIs400) {
  StartServer();
  for (std::string bad : {std::string("NOT A REQUEST\r\n\r\n"),
                          std::string("GET /hello HTTP/1.1\r\nBad Header\r\n\r\n"),
                          std::string("GET /hello HTTP/1.1\r\nContent-Length: zz\r\n\r\n")}) {
    TestClient c(port_);
    ASSERT_TRUE(c.WriteRaw(bad));
    std::string raw = c.ReadToEof();
    EXPECT_EQ(raw.rfind("HTTP/1.1 400", 0), 0u) << raw;
    EXPECT_NE(raw.find("invalid_request_error"), std::string::npos) << raw;
    EXPECT_TRUE(c.saw_eof());
  }
  TestClient c(port_);
  EXPECT_EQ(c.Send("GET", "/hello")->result_int(), 200);
}

TEST_F(HttpServerTest, KeepAliveServesSeveralRequestsOnOneConnection) {
  StartServer();
  TestClient c(port_);
  for (int i = 0; i < 3; ++i) {
    auto r = c.Send("GET", "/hello");
    ASSERT_TRUE(r) << i;
    EXPECT_EQ(r->result_int(), 200);
    EXPECT_TRUE(r->keep_alive());
  }
  // HTTP/1.0 without keep-alive: the server closes after the response.
  TestClient old(port_);
  auto r = old.Send("GET", "/hello", "", 10);
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->keep_alive());
  old.ReadToEof();
  EXPECT_TRUE(old.saw_eof());
}

TEST_F(HttpServerTest, PipelinedRequestsAreNotMistakenForADisconnect) {
  StartServer();
  TestClient c(port_);
  ASSERT_TRUE(c.WriteRaw(
      "POST /sleep HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"
      "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n"));
  std::string raw = c.ReadUntil("\r\n\r\nhello");
  size_t first = raw.find("slept");
  size_t second = raw.find("hello");
  ASSERT_NE(first, std::string::npos) << raw;
  ASSERT_NE(second, std::string::npos) << raw;
  EXPECT_LT(first, second);
  EXPECT_EQ(obs_.sleep_disconnects.load(), 0);
}

TEST_F(HttpServerTest, StreamChunksArriveBeforeTheStreamEnds) {
  StartServer();
  TestClient c(port_);
  ASSERT_TRUE(c.WriteRaw("GET /stream HTTP/1.1\r\nHost: x\r\n\r\n"));
  std::string head = c.ReadUntil("data: first");
  int64_t first_seen = NowNs();
  ASSERT_NE(head.find("data: first"), std::string::npos) << head;
  EXPECT_EQ(head.find("data: second"), std::string::npos);
  EXPECT_NE(head.find("Transfer-Encoding: chunked"), std::string::npos) << head;
  EXPECT_NE(head.find("Content-Type: text/event-stream"), std::string::npos) << head;
  std::string all = c.ReadUntil("0\r\n\r\n");
  ASSERT_NE(all.find("data: second"), std::string::npos) << all;
  ASSERT_GT(obs_.second_chunk_write_ns.load(), 0);
  EXPECT_LT(first_seen, obs_.second_chunk_write_ns.load());
  // The connection stays usable after the stream.
  auto r = c.Send("GET", "/hello");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->body(), "hello");

  // curl -N: the first event line is read before the handler writes the second.
  obs_.second_chunk_write_ns = 0;
  FILE* pipe = popen(("/usr/bin/curl -s -N -m 10 " + Url("/stream")).c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  char line[256];
  int64_t curl_first_ns = 0;
  std::string curl_out;
  while (fgets(line, sizeof(line), pipe) != nullptr) {
    curl_out += line;
    if (curl_first_ns == 0 && std::string(line).find("first") != std::string::npos) {
      curl_first_ns = NowNs();
    }
  }
  pclose(pipe);
  EXPECT_EQ(curl_out, "data: first\n\ndata: second\n\n");
  ASSERT_GT(curl_first_ns, 0);
  EXPECT_LT(curl_first_ns, obs_.second_chunk_write_ns.load());
}

TEST_F(HttpServerTest, DisconnectIsDetectedWhileTheHandlerWaits) {
  StartServer();
  TestClient c(port_);
  ASSERT_TRUE(c.WriteRaw("GET /wait HTTP/1.1\r\nHost: x\r\n\r\n"));
  ASSERT_TRUE(WaitFor([&] { return obs_.wait_started.load(); }, 2000ms));
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(obs_.disconnect_ns.load(), 0);
  int64_t closed_ns = NowNs();
  c.Close();
  ASSERT_TRUE(WaitFor([&] { return obs_.disconnect_ns.load() != 0; }, 2000ms));
  EXPECT_LT(obs_.disconnect_ns.load() - closed_ns, 1'000'000'000);
  EXPECT_TRUE(obs_.gone_after_disconnect.load());
  TestClient next(port_);
  EXPECT_EQ(next.Send("GET", "/hello")->result_int(), 200);
}

TEST_F(HttpServerTest, HandlerFailuresBecome500) {
  StartServer();
  for (const char* path : {"/throw", "/nothing"}) {
    TestClient c(port_);
    auto r = c.Send("GET", path);
    ASSERT_TRUE(r) << path;
    EXPECT_EQ(r->result_int(), 500) << path;
    auto e = ErrorOf(r->body());
    ASSERT_TRUE(e.is_object()) << r->body();
    EXPECT_EQ(e["type"], "server_error");
  }
  TestClient c(port_);
  EXPECT_EQ(c.Send("GET", "/hello")->result_int(), 200);
}

TEST_F(HttpServerTest, SixtyFourConcurrentClients) {
  StartServer();
  constexpr int kClients = 64;
  constexpr int kRequests = 3;
  std::atomic<int> ok{0};
  auto started = Clock::now();
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&] {
      TestClient c(port_);
      for (int k = 0; k < kRequests; ++k) {
        auto r = c.Send("POST", "/sleep");
        if (r && r->result_int() == 200 && r->body() == "slept") ++ok;
      }
    });
  }
  for (auto& t : threads) t.join();
  auto elapsed = Clock::now() - started;
  EXPECT_EQ(ok.load(), kClients * kRequests);
  // One after another would take 64 * 3 * 100 ms = 19.2 s.
  EXPECT_LT(elapsed, 6s);
}

TEST_F(HttpServerTest, StopWithOpenConnectionsReturnsPromptly) {
  HttpServer::Options o;
  o.stop_timeout = 500ms;
  StartServer(o);
  std::vector<std::unique_ptr<TestClient>> idle;
  for (int i = 0; i < 8; ++i) {
    idle.push_back(std::make_unique<TestClient>(port_));
    ASSERT_EQ(idle.back()->Send("GET", "/hello")->result_int(), 200);
  }
  TestClient waiting(port_), stubborn(port_);
  ASSERT_TRUE(waiting.WriteRaw("GET /wait HTTP/1.1\r\nHost: x\r\n\r\n"));
  ASSERT_TRUE(stubborn.WriteRaw("GET /stubborn HTTP/1.1\r\nHost: x\r\n\r\n"));
  ASSERT_TRUE(WaitFor([&] { return obs_.wait_started && obs_.stubborn_started; }, 2000ms));
  auto t0 = Clock::now();
  server_->Stop();
  auto elapsed = Clock::now() - t0;
  EXPECT_LT(elapsed, 1500ms);      // the stubborn handler costs stop_timeout at most
  EXPECT_NE(obs_.disconnect_ns.load(), 0);  // the waiting handler was told
  idle[0]->ReadToEof();
  EXPECT_TRUE(idle[0]->saw_eof());
  server_->Stop();  // idempotent
  TestClient refused(port_);
  EXPECT_FALSE(refused.connected());
}

TEST_F(HttpServerTest, StopWithoutBusyHandlersDoesNotWaitForTheTimeout) {
  StartServer();  // stop_timeout 2 s
  TestClient a(port_), b(port_);
  ASSERT_EQ(a.Send("GET", "/hello")->result_int(), 200);
  ASSERT_TRUE(b.WriteRaw("GET /wait HTTP/1.1\r\nHost: x\r\n\r\n"));
  ASSERT_TRUE(WaitFor([&] { return obs_.wait_started.load(); }, 2000ms));
  auto t0 = Clock::now();
  server_->Stop();
  EXPECT_LT(Clock::now() - t0, 1s);
}

TEST(HttpServerStartTest, BindErrorsAreStatuses) {
  HttpServer::Options o;
  o.port = 0;
  HttpServer first(o);
  ASSERT_TRUE(first.Start().ok());
  o.port = first.port();
  HttpServer second(o);
  Status st = second.Start();
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find(std::to_string(o.port)), std::string::npos) << st.ToString();
  EXPECT_EQ(second.port(), 0);

  HttpServer::Options bad;
  bad.port = 0;
  bad.num_threads = 0;
  EXPECT_EQ(HttpServer(bad).Start().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(first.Start().code(), StatusCode::kFailedPrecondition);  // already started
}

}  // namespace
}  // namespace tandem::http
