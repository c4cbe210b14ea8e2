// MeasureProfile: a worker's Profile (profile.h) measured on its own engine, device and model
// (`tandem profile`, issue 27), the way Dynamo's profiler sweeps a worker before the planner runs.
//   prefill  for each prompt length: one request alone (random token ids, a fresh prompt each time
//            so the prefix cache cannot serve it), from AddRequest to its first token; the median
//            of `repeats` after one untimed warm-up.
//   decode   for each context and batch: `batch` requests of `context`-token prompts, prefilled,
//            then `decode_steps` engine steps timed one by one (each step gives every request one
//            token): the median step is the ITL. The requests are aborted after.
// Shapes the engine cannot hold (a prompt over max_model_len, a batch over max_num_seqs or the KV
// pool) are skipped and listed in `skipped`.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "engine/engine.h"
#include "planner/profile.h"

namespace tandem::planner {

struct ProfileSpec {
  std::vector<int> prompt_lens = {128, 512, 1024, 2048};
  std::vector<int> contexts = {512, 2048};
  std::vector<int> batches = {1, 4, 16, 64};
  int repeats = 3;
  int decode_steps = 16;
  uint64_t seed = 1;
};

// FailedPrecondition when the engine is busy (unfinished requests) or nothing could be measured;
// an engine error of a request, as its status.
Result<Profile> MeasureProfile(Engine& engine, const ProfileSpec& spec, std::vector<std::string>* skipped);

}  // namespace tandem::planner
