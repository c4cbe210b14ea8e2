// proto_convert.h: every field survives C++ -> proto -> bytes -> proto -> C++.
#include <gtest/gtest.h>

#include "rpc/proto_convert.h"

namespace tandem::runtime {
namespace {

template <typename Proto>
Proto ThroughTheWire(const Proto& p) {
  Proto back;
  EXPECT_TRUE(back.ParseFromString(p.SerializeAsString()));
  return back;
}

TEST(ProtoConvert, GenerateRequestRoundTripsEveryField) {
  GenerateRequest r;
  r.request_id = "cmpl-1-0";
  r.prompt_token_ids = {1, 151643, 0, 42};
  SamplingParams& p = r.params;
  p.temperature = 0.7f;
  p.top_p = 0.9f;
  p.top_k = 40;
  p.min_p = 0.05f;
  p.seed = 18446744073709551615ull;
  p.repetition_penalty = 1.1f;
  p.frequency_penalty = -0.5f;
  p.presence_penalty = 0.25f;
  p.max_tokens = 77;
  p.stop_token_ids = {151645, 7};
  p.stop = {"\n\n", "END", ""};
  p.ignore_eos = true;
  p.logprobs = 5;
  p.skip_special_tokens = false;
  r.options.prefill_worker_id = "prefill-7f3a";
  v1::GenerateRequest proto;
  ToProto(r, &proto);
  GenerateRequest back = FromProto(ThroughTheWire(proto));
  EXPECT_EQ(back.request_id, r.request_id);
  EXPECT_EQ(back.prompt_token_ids, r.prompt_token_ids);
  EXPECT_EQ(back.options.prefill_worker_id, "prefill-7f3a");
  const SamplingParams& q = back.params;
  EXPECT_EQ(q.temperature, p.temperature);
  EXPECT_EQ(q.top_p, p.top_p);
  EXPECT_EQ(q.top_k, p.top_k);
  EXPECT_EQ(q.min_p, p.min_p);
  EXPECT_EQ(q.seed, p.seed);
  EXPECT_EQ(q.repetition_penalty, p.repetition_penalty);
  EXPECT_EQ(q.frequency_penalty, p.frequency_penalty);
  EXPECT_EQ(q.presence_penalty, p.presence_penalty);
  EXPECT_EQ(q.max_tokens, p.max_tokens);
  EXPECT_EQ(q.stop_token_ids, p.stop_token_ids);
  EXPECT_EQ(q.stop, p.stop);
  EXPECT_EQ(q.ignore_eos, p.ignore_eos);
  EXPECT_EQ(q.logprobs, p.logprobs);
  EXPECT_EQ(q.skip_special_tokens, p.skip_special_tokens);
}

TEST(ProtoConvert, PrefillWorkerHintIsEmptyUnlessSetAndOnlyIt) {
  GenerateRequest r;
  r.request_id = "x";
  v1::GenerateRequest proto;
  ToProto(r, &proto);
  EXPECT_TRUE(proto.prefill_worker_id().empty());
  EXPECT_TRUE(FromProto(ThroughTheWire(proto)).options.prefill_worker_id.empty());
  // The other roles are the receiving worker's own: not carried.
  r.options.allow_remote_prefill = true;
  r.options.hold_blocks = true;
  r.options.prefill_worker_id = "p1";
  ToProto(r, &proto);
  GenerateRequest back = FromProto(ThroughTheWire(proto));
  EXPECT_EQ(back.options.prefill_worker_id, "p1");
  EXPECT_FALSE(back.options.allow_remote_prefill);
  EXPECT_FALSE(back.options.hold_blocks);
}

TEST(ProtoConvert, DefaultsAndAnUnsetSeedStayTheSame) {
  SamplingParams p;  // defaults: temperature 1, top_p 1, max_tokens 16, logprobs -1, ...
  v1::SamplingParams proto;
  ToProto(p, &proto);
  SamplingParams back = FromProto(ThroughTheWire(proto));
  EXPECT_FALSE(back.seed.has_value());
  EXPECT_EQ(back.temperature, 1.0f);
  EXPECT_EQ(back.top_p, 1.0f);
  EXPECT_EQ(back.max_tokens, 16);
  EXPECT_EQ(back.logprobs, -1);
  EXPECT_TRUE(back.skip_special_tokens);
  // Seed 0 is a value, not "unset".
  p.seed = 0;
  ToProto(p, &proto);
  EXPECT_EQ(FromProto(ThroughTheWire(proto)).seed, std::optional<uint64_t>(0));
}

TEST(ProtoConvert, RequestOutputRoundTripsEveryField) {
  RequestOutput o;
  o.request_id = "r";
  o.new_token_ids = {5, 6};
  o.new_logprobs = {{5, -0.25f, {{5, -0.25f}, {9, -2.0f}}}, {6, -1.5f, {}}};
  o.new_text = "héllo \xF0\x9F\x98\x80";
  o.finished = true;
  o.finish_reason = FinishReason::kError;
  o.error = "boom";
  o.num_prompt_tokens = 12;
  o.num_cached_tokens = 8;
  o.num_output_tokens = 30;
  v1::GenerateOutput proto;
  ToProto(o, &proto);
  RequestOutput back = FromProto(ThroughTheWire(proto));
  EXPECT_EQ(back.request_id, o.request_id);
  EXPECT_EQ(back.new_token_ids, o.new_token_ids);
  ASSERT_EQ(back.new_logprobs.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(back.new_logprobs[i].token_id, o.new_logprobs[i].token_id);
    EXPECT_EQ(back.new_logprobs[i].logprob, o.new_logprobs[i].logprob);
    EXPECT_EQ(back.new_logprobs[i].top, o.new_logprobs[i].top);
  }
  EXPECT_EQ(back.new_text, o.new_text);
  EXPECT_EQ(back.finished, o.finished);
  EXPECT_EQ(back.finish_reason, o.finish_reason);
  EXPECT_EQ(back.error, o.error);
  EXPECT_EQ(back.num_prompt_tokens, o.num_prompt_tokens);
  EXPECT_EQ(back.num_cached_tokens, o.num_cached_tokens);
  EXPECT_EQ(back.num_output_tokens, o.num_output_tokens);
}

TEST(ProtoConvert, EveryFinishReasonRoundTrips) {
  for (FinishReason r : {FinishReason::kNone, FinishReason::kStop, FinishReason::kLength,
                         FinishReason::kAbort, FinishReason::kError}) {
    EXPECT_EQ(FromProto(ToProto(r)), r) << FinishReasonName(r);
  }
  EXPECT_EQ(FromProto(static_cast<v1::FinishReason>(99)), FinishReason::kError);
}

TEST(ProtoConvert, HealthCarriesStatsAndModelInfo) {
  EngineClientStats s;
  s.engine = {3, 4, 100, 17, 1000, 250};
  s.num_pending = 9;
  ServedModelInfo info{"tiny", 4096, 151936};
  v1::HealthResponse proto;
  ToProto(s, info, true, &proto);
  v1::HealthResponse wire = ThroughTheWire(proto);
  EXPECT_TRUE(wire.ready());
  EngineClientStats bs = StatsFromProto(wire);
  EXPECT_EQ(bs.engine.num_running, 3);
  EXPECT_EQ(bs.engine.num_waiting, 4);
  EXPECT_EQ(bs.engine.num_kv_blocks_total, 100);
  EXPECT_EQ(bs.engine.num_kv_blocks_used, 17);
  EXPECT_EQ(bs.engine.prefix_cache_queries, 1000u);
  EXPECT_EQ(bs.engine.prefix_cache_hits, 250u);
  EXPECT_EQ(bs.num_pending, 9);
  ServedModelInfo bi = ModelInfoFromProto(wire);
  EXPECT_EQ(bi.name, "tiny");
  EXPECT_EQ(bi.max_model_len, 4096);
  EXPECT_EQ(bi.vocab_size, 151936);
}

TEST(ProtoConvert, StatusCodesCrossTheWire) {
  for (StatusCode c : {StatusCode::kInvalidArgument, StatusCode::kNotFound, StatusCode::kOutOfRange,
                       StatusCode::kResourceExhausted, StatusCode::kFailedPrecondition,
                       StatusCode::kUnimplemented, StatusCode::kDataLoss, StatusCode::kInternal}) {
    Status back = FromGrpcStatus(ToGrpcStatus(Status(c, "msg")));
    EXPECT_EQ(back.code(), c);
    EXPECT_EQ(back.message(), "msg");
  }
  EXPECT_TRUE(FromGrpcStatus(ToGrpcStatus(Status::Ok())).ok());
  EXPECT_EQ(FromGrpcStatus(grpc::Status(grpc::StatusCode::UNAVAILABLE, "x")).code(),
            StatusCode::kFailedPrecondition);
  EXPECT_STREQ(GrpcCodeName(grpc::StatusCode::DEADLINE_EXCEEDED), "DEADLINE_EXCEEDED");
}

TEST(ProtoConvert, RemotePrefillRequestAndResultRoundTrip) {
  RemotePrefillRequest in;
  in.request_id = "r-7";
  in.prompt_token_ids = {5, 6, 7, 8, 9};
  in.params.temperature = 0.7f;
  in.params.seed = 42;
  in.params.logprobs = 2;
  in.target.agent_name = "decode-1";
  in.target.agent_metadata = std::string("\x00\x01meta\xff", 7);
  in.target.layer_base = {0x7f0000001000ull, 0x7f0000101000ull};
  in.target.block_bytes = 98304;
  in.target.block_size = 16;
  in.target.block_ids = {3, 4, 9};
  in.target.num_cached_tokens = 16;
  in.write_window = std::chrono::milliseconds(115000);
  v1::RemotePrefillRequest wire;
  ToProto(in, &wire);
  v1::RemotePrefillRequest parsed;
  ASSERT_TRUE(parsed.ParseFromString(wire.SerializeAsString()));
  RemotePrefillRequest out = FromProto(parsed);
  EXPECT_EQ(out.request_id, in.request_id);
  EXPECT_EQ(out.prompt_token_ids, in.prompt_token_ids);
  EXPECT_EQ(out.params.temperature, 0.7f);
  ASSERT_TRUE(out.params.seed.has_value());
  EXPECT_EQ(*out.params.seed, 42u);
  EXPECT_EQ(out.params.logprobs, 2);
  EXPECT_EQ(out.target.agent_name, in.target.agent_name);
  EXPECT_EQ(out.target.agent_metadata, in.target.agent_metadata);
  EXPECT_EQ(out.target.layer_base, in.target.layer_base);
  EXPECT_EQ(out.target.block_bytes, in.target.block_bytes);
  EXPECT_EQ(out.target.block_size, in.target.block_size);
  EXPECT_EQ(out.target.block_ids, in.target.block_ids);
  EXPECT_EQ(out.target.num_cached_tokens, in.target.num_cached_tokens);
  EXPECT_EQ(out.write_window, in.write_window);

  RemotePrefillResult res;
  res.first_token_id = 1234;
  res.logprobs.push_back(TokenLogprob{1234, -0.5f, {{1234, -0.5f}, {99, -1.25f}}});
  res.num_prefill_cached_tokens = 32;
  res.num_blocks_written = 2;
  res.bytes_written = 2 * 98304;
  res.transfer_seconds = 0.0042;
  v1::RemotePrefillResponse rw;
  ToProto(res, &rw);
  RemotePrefillResult back = FromProto(rw);
  EXPECT_EQ(back.first_token_id, 1234);
  ASSERT_EQ(back.logprobs.size(), 1u);
  EXPECT_EQ(back.logprobs[0].token_id, 1234);
  EXPECT_EQ(back.logprobs[0].top, res.logprobs[0].top);
  EXPECT_EQ(back.num_prefill_cached_tokens, 32);
  EXPECT_EQ(back.num_blocks_written, 2);
  EXPECT_EQ(back.bytes_written, res.bytes_written);
  EXPECT_DOUBLE_EQ(back.transfer_seconds, 0.0042);
  // No logprobs asked: none come back.
  v1::RemotePrefillResponse plain;
  ToProto(RemotePrefillResult{}, &plain);
  EXPECT_TRUE(FromProto(plain).logprobs.empty());
}

}  // namespace
}  // namespace tandem::runtime
