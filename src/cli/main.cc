// tandem: the command-line entry point.
#include <cstdio>
#include <map>
#include <string>

#include "cli/commands.h"
#include "common/logging.h"

int main(int argc, char** argv) {
  tandem::log::Init();
  CLI::App app{"tandem: an LLM server with disaggregated prefill and decode"};
  app.require_subcommand(1);
  std::map<CLI::App*, tandem::cli::Runner> runners;
  {
    CLI::App* sub = app.add_subcommand("generate", "Generate text for one prompt (CPU engine)");
    runners[sub] = tandem::cli::RegisterGenerate(*sub);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  for (auto& [sub, run] : runners) {
    if (sub->parsed()) return run();
  }
  return 2;
}
