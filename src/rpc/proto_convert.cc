#include "rpc/proto_convert.h"

namespace tandem::runtime {

void ToProto(const SamplingParams& in, v1::SamplingParams* out) {
  out->set_temperature(in.temperature);
  out->set_top_p(in.top_p);
  out->set_top_k(in.top_k);
  out->set_min_p(in.min_p);
  if (in.seed) out->set_seed(*in.seed);
  else out->clear_seed();
  out->set_repetition_penalty(in.repetition_penalty);
  out->set_frequency_penalty(in.frequency_penalty);
  out->set_presence_penalty(in.presence_penalty);
  out->set_max_tokens(in.max_tokens);
  out->mutable_stop_token_ids()->Assign(in.stop_token_ids.begin(), in.stop_token_ids.end());
  out->clear_stop();
  for (const std::string& s : in.stop) out->add_stop(s);
  out->set_ignore_eos(in.ignore_eos);
  out->set_logprobs(in.logprobs);
  out->set_skip_special_tokens(in.skip_special_tokens);
  out->set_structured_kind(static_cast<int32_t>(in.structured.kind));
  out->set_structured_spec(in.structured.spec);
  out->set_structured_any_whitespace(in.structured.any_whitespace);
  out->set_structured_prefix_tokens(in.structured_prefix_tokens);
}

SamplingParams FromProto(const v1::SamplingParams& in) {
  SamplingParams p;
  p.temperature = in.temperature();
  p.top_p = in.top_p();
  p.top_k = in.top_k();
  p.min_p = in.min_p();
  if (in.has_seed()) p.seed = in.seed();
  p.repetition_penalty = in.repetition_penalty();
  p.frequency_penalty = in.frequency_penalty();
  p.presence_penalty = in.presence_penalty();
  p.max_tokens = in.max_tokens();
  p.stop_token_ids.assign(in.stop_token_ids().begin(), in.stop_token_ids().end());
  p.stop.assign(in.stop().begin(), in.stop().end());
  p.ignore_eos = in.ignore_eos();
  p.logprobs = in.logprobs();
  p.skip_special_tokens = in.skip_special_tokens();
  // An unknown kind (a newer peer) is kept as is: the engine refuses it, never samples freely.
  p.structured.kind = static_cast<grammar::StructuredKind>(in.structured_kind());
  p.structured.spec = in.structured_spec();
  p.structured.any_whitespace = in.structured_any_whitespace();
  p.structured_prefix_tokens = in.structured_prefix_tokens();
  return p;
}

void ToProto(const GenerateRequest& in, v1::GenerateRequest* out) {
  out->set_request_id(in.request_id);
  out->mutable_prompt_token_ids()->Assign(in.prompt_token_ids.begin(), in.prompt_token_ids.end());
  ToProto(in.params, out->mutable_params());
  out->set_prefill_worker_id(in.options.prefill_worker_id);
}

GenerateRequest FromProto(const v1::GenerateRequest& in) {
  GenerateRequest r;
  r.request_id = in.request_id();
  r.prompt_token_ids.assign(in.prompt_token_ids().begin(), in.prompt_token_ids().end());
  r.params = FromProto(in.params());
  r.options.prefill_worker_id = in.prefill_worker_id();
  return r;
}

v1::FinishReason ToProto(FinishReason reason) {
  switch (reason) {
    case FinishReason::kNone: return v1::FINISH_REASON_NONE;
    case FinishReason::kStop: return v1::FINISH_REASON_STOP;
    case FinishReason::kLength: return v1::FINISH_REASON_LENGTH;
    case FinishReason::kAbort: return v1::FINISH_REASON_ABORT;
    case FinishReason::kError: return v1::FINISH_REASON_ERROR;
  }
  return v1::FINISH_REASON_ERROR;
}

FinishReason FromProto(v1::FinishReason reason) {
  switch (reason) {
    case v1::FINISH_REASON_NONE: return FinishReason::kNone;
    case v1::FINISH_REASON_STOP: return FinishReason::kStop;
    case v1::FINISH_REASON_LENGTH: return FinishReason::kLength;
    case v1::FINISH_REASON_ABORT: return FinishReason::kAbort;
    case v1::FINISH_REASON_ERROR: return FinishReason::kError;
    default: return FinishReason::kError;  // a newer peer's value
  }
}

void ToProto(const TokenLogprob& lp, v1::TokenLogprob* p) {
  p->set_token_id(lp.token_id);
  p->set_logprob(lp.logprob);
  p->clear_top();
  for (const auto& [id, logprob] : lp.top) {
    v1::TopLogprob* t = p->add_top();
    t->set_token_id(id);
    t->set_logprob(logprob);
  }
}

TokenLogprob FromProto(const v1::TokenLogprob& p) {
  TokenLogprob lp;
  lp.token_id = p.token_id();
  lp.logprob = p.logprob();
  lp.top.reserve(p.top_size());
  for (const v1::TopLogprob& t : p.top()) lp.top.emplace_back(t.token_id(), t.logprob());
  return lp;
}

void ToProto(const RemotePrefillRequest& in, v1::RemotePrefillRequest* out) {
  out->set_request_id(in.request_id);
  out->mutable_prompt_token_ids()->Assign(in.prompt_token_ids.begin(), in.prompt_token_ids.end());
  ToProto(in.params, out->mutable_params());
  v1::KVTarget* t = out->mutable_target();
  t->set_agent_name(in.target.agent_name);
  t->set_agent_metadata(in.target.agent_metadata);
  t->mutable_layer_base()->Assign(in.target.layer_base.begin(), in.target.layer_base.end());
  t->set_block_bytes(in.target.block_bytes);
  t->set_kv_cache_dtype(in.target.kv_cache_dtype);
  t->set_block_size(in.target.block_size);
  t->mutable_block_ids()->Assign(in.target.block_ids.begin(), in.target.block_ids.end());
  t->set_num_cached_tokens(in.target.num_cached_tokens);
  out->set_write_window_ms(in.write_window.count());
  out->set_call_id(in.call_id);
}

RemotePrefillRequest FromProto(const v1::RemotePrefillRequest& in) {
  RemotePrefillRequest r;
  r.request_id = in.request_id();
  r.prompt_token_ids.assign(in.prompt_token_ids().begin(), in.prompt_token_ids().end());
  r.params = FromProto(in.params());
  const v1::KVTarget& t = in.target();
  r.target.agent_name = t.agent_name();
  r.target.agent_metadata = t.agent_metadata();
  r.target.layer_base.assign(t.layer_base().begin(), t.layer_base().end());
  r.target.block_bytes = t.block_bytes();
  r.target.kv_cache_dtype = t.kv_cache_dtype();
  r.target.block_size = t.block_size();
  r.target.block_ids.assign(t.block_ids().begin(), t.block_ids().end());
  r.target.num_cached_tokens = t.num_cached_tokens();
  r.write_window = std::chrono::milliseconds(in.write_window_ms());
  r.call_id = in.call_id();
  return r;
}

void ToProto(const RemotePrefillResult& in, v1::RemotePrefillResponse* out) {
  out->set_first_token_id(in.first_token_id);
  if (!in.logprobs.empty()) ToProto(in.logprobs.front(), out->mutable_first_logprob());
  out->set_num_prefill_cached_tokens(in.num_prefill_cached_tokens);
  out->set_num_blocks_written(in.num_blocks_written);
  out->set_bytes_written(in.bytes_written);
  out->set_transfer_seconds(in.transfer_seconds);
}

RemotePrefillResult FromProto(const v1::RemotePrefillResponse& in) {
  RemotePrefillResult r;
  r.first_token_id = in.first_token_id();
  if (in.has_first_logprob()) r.logprobs.push_back(FromProto(in.first_logprob()));
  r.num_prefill_cached_tokens = in.num_prefill_cached_tokens();
  r.num_blocks_written = in.num_blocks_written();
  r.bytes_written = in.bytes_written();
  r.transfer_seconds = in.transfer_seconds();
  return r;
}

void ToProto(const RequestOutput& in, v1::GenerateOutput* out) {
  out->set_request_id(in.request_id);
  out->mutable_new_token_ids()->Assign(in.new_token_ids.begin(), in.new_token_ids.end());
  out->clear_new_logprobs();
  for (const TokenLogprob& lp : in.new_logprobs) ToProto(lp, out->add_new_logprobs());
  out->set_new_text(in.new_text);
  out->set_finished(in.finished);
  out->set_finish_reason(ToProto(in.finish_reason));
  out->set_error(in.error);
  out->set_num_prompt_tokens(in.num_prompt_tokens);
  out->set_num_cached_tokens(in.num_cached_tokens);
  out->set_num_output_tokens(in.num_output_tokens);
}

RequestOutput FromProto(const v1::GenerateOutput& in) {
  RequestOutput r;
  r.request_id = in.request_id();
  r.new_token_ids.assign(in.new_token_ids().begin(), in.new_token_ids().end());
  r.new_logprobs.reserve(in.new_logprobs_size());
  for (const v1::TokenLogprob& p : in.new_logprobs()) r.new_logprobs.push_back(FromProto(p));
  r.new_text = in.new_text();
  r.finished = in.finished();
  r.finish_reason = FromProto(in.finish_reason());
  r.error = in.error();
  r.num_prompt_tokens = in.num_prompt_tokens();
  r.num_cached_tokens = in.num_cached_tokens();
  r.num_output_tokens = in.num_output_tokens();
  return r;
}

void ToProto(const EngineClientStats& stats, const ServedModelInfo& info, bool ready,
             v1::HealthResponse* out) {
  out->set_ready(ready);
  out->set_model(info.name);
  out->set_max_model_len(info.max_model_len);
  out->set_vocab_size(info.vocab_size);
  out->set_num_running(stats.engine.num_running);
  out->set_num_waiting(stats.engine.num_waiting);
  out->set_num_kv_blocks_total(stats.engine.num_kv_blocks_total);
  out->set_num_kv_blocks_used(stats.engine.num_kv_blocks_used);
  out->set_prefix_cache_queries(stats.engine.prefix_cache_queries);
  out->set_prefix_cache_hits(stats.engine.prefix_cache_hits);
  out->set_num_pending(stats.num_pending);
  out->set_kv_offload_host_blocks(stats.engine.kv_offload_host_blocks);
  out->set_kv_offload_host_capacity_blocks(stats.engine.kv_offload_host_capacity_blocks);
  out->set_kv_offloaded_blocks(stats.engine.kv_offloaded_blocks);
  out->set_kv_onboarded_blocks(stats.engine.kv_onboarded_blocks);
  out->set_kv_offloaded_bytes(stats.engine.kv_offloaded_bytes);
  out->set_kv_onboarded_bytes(stats.engine.kv_onboarded_bytes);
  out->set_kv_offload_seconds(stats.engine.kv_offload_seconds);
  out->set_kv_onboard_seconds(stats.engine.kv_onboard_seconds);
  out->set_kv_offload_disk_blocks(stats.engine.kv_offload_disk_blocks);
  out->set_kv_offload_disk_capacity_blocks(stats.engine.kv_offload_disk_capacity_blocks);
  out->set_kv_offload_disk_written_blocks(stats.engine.kv_offload_disk_written_blocks);
  out->set_kv_offload_disk_written_bytes(stats.engine.kv_offload_disk_written_bytes);
  out->set_kv_offload_disk_read_blocks(stats.engine.kv_offload_disk_read_blocks);
  out->set_kv_offload_disk_read_bytes(stats.engine.kv_offload_disk_read_bytes);
  out->set_kv_offload_disk_write_seconds(stats.engine.kv_offload_disk_write_seconds);
  out->set_kv_offload_disk_read_seconds(stats.engine.kv_offload_disk_read_seconds);
  out->set_kv_offload_disk_write_errors(stats.engine.kv_offload_disk_write_errors);
  out->set_kv_offload_disk_corrupt(stats.engine.kv_offload_disk_corrupt);
  out->set_kv_offload_fetched_blocks(stats.engine.kv_offload_fetched_blocks);
}

EngineClientStats StatsFromProto(const v1::HealthResponse& in) {
  EngineClientStats s;
  s.engine.num_running = in.num_running();
  s.engine.num_waiting = in.num_waiting();
  s.engine.num_kv_blocks_total = in.num_kv_blocks_total();
  s.engine.num_kv_blocks_used = in.num_kv_blocks_used();
  s.engine.prefix_cache_queries = in.prefix_cache_queries();
  s.engine.prefix_cache_hits = in.prefix_cache_hits();
  s.num_pending = in.num_pending();
  s.engine.kv_offload_host_blocks = in.kv_offload_host_blocks();
  s.engine.kv_offload_host_capacity_blocks = in.kv_offload_host_capacity_blocks();
  s.engine.kv_offloaded_blocks = in.kv_offloaded_blocks();
  s.engine.kv_onboarded_blocks = in.kv_onboarded_blocks();
  s.engine.kv_offloaded_bytes = in.kv_offloaded_bytes();
  s.engine.kv_onboarded_bytes = in.kv_onboarded_bytes();
  s.engine.kv_offload_seconds = in.kv_offload_seconds();
  s.engine.kv_onboard_seconds = in.kv_onboard_seconds();
  s.engine.kv_offload_disk_blocks = in.kv_offload_disk_blocks();
  s.engine.kv_offload_disk_capacity_blocks = in.kv_offload_disk_capacity_blocks();
  s.engine.kv_offload_disk_written_blocks = in.kv_offload_disk_written_blocks();
  s.engine.kv_offload_disk_written_bytes = in.kv_offload_disk_written_bytes();
  s.engine.kv_offload_disk_read_blocks = in.kv_offload_disk_read_blocks();
  s.engine.kv_offload_disk_read_bytes = in.kv_offload_disk_read_bytes();
  s.engine.kv_offload_disk_write_seconds = in.kv_offload_disk_write_seconds();
  s.engine.kv_offload_disk_read_seconds = in.kv_offload_disk_read_seconds();
  s.engine.kv_offload_disk_write_errors = in.kv_offload_disk_write_errors();
  s.engine.kv_offload_disk_corrupt = in.kv_offload_disk_corrupt();
  s.engine.kv_offload_fetched_blocks = in.kv_offload_fetched_blocks();
  return s;
}

ServedModelInfo ModelInfoFromProto(const v1::HealthResponse& in) {
  ServedModelInfo info;
  info.name = in.model();
  info.max_model_len = in.max_model_len();
  info.vocab_size = in.vocab_size();
  return info;
}

}  // namespace tandem::runtime

namespace tandem::runtime {

grpc::Status ToGrpcStatus(const Status& status) {
  grpc::StatusCode code = grpc::StatusCode::INTERNAL;
  switch (status.code()) {
    case StatusCode::kOk: return grpc::Status::OK;
    case StatusCode::kInvalidArgument: code = grpc::StatusCode::INVALID_ARGUMENT; break;
    case StatusCode::kNotFound: code = grpc::StatusCode::NOT_FOUND; break;
    case StatusCode::kOutOfRange: code = grpc::StatusCode::OUT_OF_RANGE; break;
    case StatusCode::kResourceExhausted: code = grpc::StatusCode::RESOURCE_EXHAUSTED; break;
    case StatusCode::kFailedPrecondition: code = grpc::StatusCode::FAILED_PRECONDITION; break;
    case StatusCode::kUnimplemented: code = grpc::StatusCode::UNIMPLEMENTED; break;
    case StatusCode::kDataLoss: code = grpc::StatusCode::DATA_LOSS; break;
    case StatusCode::kInternal: code = grpc::StatusCode::INTERNAL; break;
  }
  return grpc::Status(code, status.message());
}

Status FromGrpcStatus(const grpc::Status& status) {
  StatusCode code = StatusCode::kInternal;
  switch (status.error_code()) {
    case grpc::StatusCode::OK: return Status::Ok();
    case grpc::StatusCode::INVALID_ARGUMENT: code = StatusCode::kInvalidArgument; break;
    case grpc::StatusCode::NOT_FOUND: code = StatusCode::kNotFound; break;
    case grpc::StatusCode::OUT_OF_RANGE: code = StatusCode::kOutOfRange; break;
    case grpc::StatusCode::RESOURCE_EXHAUSTED: code = StatusCode::kResourceExhausted; break;
    case grpc::StatusCode::UNIMPLEMENTED: code = StatusCode::kUnimplemented; break;
    case grpc::StatusCode::DATA_LOSS: code = StatusCode::kDataLoss; break;
    case grpc::StatusCode::FAILED_PRECONDITION:
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::DEADLINE_EXCEEDED:
    case grpc::StatusCode::CANCELLED:
    case grpc::StatusCode::ABORTED:
      code = StatusCode::kFailedPrecondition;
      break;
    default: break;
  }
  return Status(code, status.error_message());
}

const char* GrpcCodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK: return "OK";
    case grpc::StatusCode::CANCELLED: return "CANCELLED";
    case grpc::StatusCode::UNKNOWN: return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED: return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND: return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS: return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED: return "PERMISSION_DENIED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION: return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED: return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE: return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED: return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL: return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE: return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS: return "DATA_LOSS";
    case grpc::StatusCode::UNAUTHENTICATED: return "UNAUTHENTICATED";
    default: return "UNKNOWN";
  }
}

}  // namespace tandem::runtime
