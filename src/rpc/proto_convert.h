// Conversions between the request-plane messages (tandem.proto, package tandem.v1) and the
// engine's C++ structs. The one place that knows both; include it only from .cc files (it pulls
// in the generated protobuf header).
//
// Round trips are exact: every field of GenerateRequest / SamplingParams / RequestOutput /
// TokenLogprob / EngineClientStats + ServedModelInfo has a proto field (an unset seed stays unset).
// Of GenerateRequest::options (RequestOptions) only prefill_worker_id crosses the wire; the other
// roles are the receiving worker's own (its mode sets them).
#pragma once

#include <grpcpp/support/status.h>

#include "engine/engine_client.h"
#include "rpc/remote_prefill.h"
#include "rpc/tandem.pb.h"

namespace tandem::runtime {

void ToProto(const SamplingParams& in, v1::SamplingParams* out);
SamplingParams FromProto(const v1::SamplingParams& in);

void ToProto(const GenerateRequest& in, v1::GenerateRequest* out);
GenerateRequest FromProto(const v1::GenerateRequest& in);

void ToProto(const TokenLogprob& in, v1::TokenLogprob* out);
TokenLogprob FromProto(const v1::TokenLogprob& in);

// Remote prefill (remote_prefill.h). The response carries the first token's logprob only.
void ToProto(const RemotePrefillRequest& in, v1::RemotePrefillRequest* out);
RemotePrefillRequest FromProto(const v1::RemotePrefillRequest& in);
void ToProto(const RemotePrefillResult& in, v1::RemotePrefillResponse* out);
RemotePrefillResult FromProto(const v1::RemotePrefillResponse& in);

void ToProto(const RequestOutput& in, v1::GenerateOutput* out);
RequestOutput FromProto(const v1::GenerateOutput& in);

v1::FinishReason ToProto(FinishReason reason);
FinishReason FromProto(v1::FinishReason reason);

// Health: the engine's load and the model it serves.
void ToProto(const EngineClientStats& stats, const ServedModelInfo& info, bool ready,
             v1::HealthResponse* out);
EngineClientStats StatsFromProto(const v1::HealthResponse& in);
ServedModelInfo ModelInfoFromProto(const v1::HealthResponse& in);

// Status codes across the wire: kInvalidArgument <-> INVALID_ARGUMENT, kNotFound <-> NOT_FOUND,
// kOutOfRange <-> OUT_OF_RANGE, kResourceExhausted <-> RESOURCE_EXHAUSTED, kFailedPrecondition <->
// FAILED_PRECONDITION, kUnimplemented <-> UNIMPLEMENTED, kDataLoss <-> DATA_LOSS, others INTERNAL.
// From gRPC, UNAVAILABLE / DEADLINE_EXCEEDED / CANCELLED / ABORTED become kFailedPrecondition.
grpc::Status ToGrpcStatus(const Status& status);
Status FromGrpcStatus(const grpc::Status& status);
// "UNAVAILABLE", "DEADLINE_EXCEEDED", ...
const char* GrpcCodeName(grpc::StatusCode code);

}  // namespace tandem::runtime
