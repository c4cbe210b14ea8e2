// tandem profile: measures what one worker of this model can do on this device (planner/profiler.h)
// and writes the profile the SLA planner reads (planner/profile.h): prefill TTFT against prompt
// length, decode ITL against batch and context.
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/engine_options.h"
#include "cli/model_bundle.h"
#include "common/logging.h"
#include "planner/profiler.h"

namespace tandem::cli {
namespace {

struct ProfileOptions {
  EngineOptions engine;
  planner::ProfileSpec spec;
  std::string output = "profile.json";
};

int RunProfile(const ProfileOptions& opt) {
  const Result<int> device_id = ParseDevice(opt.engine.device);
  if (!device_id.ok()) {
    std::fprintf(stderr, "tandem profile: %s\n", device_id.status().ToString().c_str());
    return 1;
  }
  EngineConfig config = opt.engine.ToEngineConfig();
  config.enable_prefix_caching = false;  // every prompt computed
  auto bundle =
      LoadModelBundle(opt.engine.ModelDir(), config, ChatTemplateUse::kIfPresent, *device_id);
  if (!bundle.ok()) {
    std::fprintf(stderr, "tandem profile: %s\n", bundle.status().ToString().c_str());
    return 1;
  }
  std::vector<std::string> skipped;
  auto profile = planner::MeasureProfile(*bundle->engine, opt.spec, &skipped);
  for (const std::string& s : skipped) log::warn("profile: skipped {}", s);
  if (!profile.ok()) {
    std::fprintf(stderr, "tandem profile: %s\n", profile.status().ToString().c_str());
    return 1;
  }
  profile->model = opt.engine.ServedModelName();
  profile->device = opt.engine.device;
  std::ofstream out(opt.output);
  out << planner::ToJson(*profile).dump(2) << "\n";
  if (!out.good()) {
    std::fprintf(stderr, "tandem profile: cannot write %s\n", opt.output.c_str());
    return 1;
  }
  for (const planner::PrefillPoint& p : profile->prefill) {
    std::printf("prefill %6d tokens  %9.2f ms\n", p.prompt_tokens, p.ttft_ms);
  }
  for (const planner::DecodePoint& p : profile->decode) {
    std::printf("decode  context %6d  batch %4d  %8.2f ms/token\n", p.context, p.batch, p.itl_ms);
  }
  std::printf("wrote %s\n", opt.output.c_str());
  return 0;
}

}  // namespace

Runner RegisterProfile(CLI::App& app) {
  auto opt = std::make_shared<ProfileOptions>();
  AddEngineOptions(app, &opt->engine);
  app.add_option("--prompt-lens", opt->spec.prompt_lens, "Prompt lengths of the prefill sweep")->delimiter(',');
  app.add_option("--contexts", opt->spec.contexts, "Contexts (tokens per request) of the decode sweep")
      ->delimiter(',');
  app.add_option("--batches", opt->spec.batches, "Running requests of the decode sweep")->delimiter(',');
  app.add_option("--repeats", opt->spec.repeats, "Timed prefills per length (after one warm-up)")
      ->check(CLI::Range(1, 1000));
  app.add_option("--decode-steps", opt->spec.decode_steps, "Timed decode steps per shape")
      ->check(CLI::Range(1, 100000));
  app.add_option("-o,--output", opt->output, "Where the profile JSON goes");
  return [opt] { return RunProfile(*opt); };
}

}  // namespace tandem::cli
