// Bad inputs to `tandem generate` end in a clear message and exit code 1, never a crash:
// missing model files, truncated safetensors, a tensor shape that disagrees with config.json,
// an unknown architecture, a prompt longer than the context, a KV pool too small for one request.
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/file_util.h"
#include "subprocess.h"

namespace tandem {
namespace {

namespace fs = std::filesystem;
using testing::RunCommand;
using testing::ShellQuote;

class GenerateErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("tandem_bad_model_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    src_ = DefaultModelDir();
    for (const char* f : {"tokenizer.json", "tokenizer_config.json", "generation_config.json"}) {
      fs::create_symlink(fs::path(src_) / f, dir_ / f);
    }
  }
  void TearDown() override { fs::remove_all(dir_); }

  void LinkWeights() { fs::create_symlink(fs::path(src_) / "model.safetensors", dir_ / "model.safetensors"); }
  void WriteConfig(const nlohmann::json& config) {
    std::ofstream(dir_ / "config.json") << config.dump(2);
  }
  nlohmann::json Config() { return *ReadJsonFile(src_ + "/config.json"); }

  testing::CommandResult Generate(const std::string& model, const std::string& extra = "") {
    return RunCommand(std::string(TANDEM_BINARY) + " generate --model " + ShellQuote(model) +
                          " --prompt " + ShellQuote("The jury said") + " --max-tokens 4 " + extra,
                      120);
  }

  fs::path dir_;
  std::string src_;
};

// Exit code 1 (a handled error, not a signal) and the message names the problem.
#define EXPECT_CLEAN_ERROR(result, needle)                                   \
  do {                                                                       \
    EXPECT_EQ((result).exit_code, 1) << (result).err;                        \
    EXPECT_NE((result).err.find(needle), std::string::npos) << (result).err; \
  } while (0)

TEST_F(GenerateErrors, MissingModelDirectory) {
  auto r = Generate((dir_ / "does-not-exist").string());
  EXPECT_CLEAN_ERROR(r, "not found");
}

TEST_F(GenerateErrors, MissingWeights) {
  WriteConfig(Config());
  auto r = Generate(dir_.string());
  EXPECT_CLEAN_ERROR(r, "safetensors");
}

TEST_F(GenerateErrors, TruncatedSafetensors) {
  WriteConfig(Config());
  std::ifstream in(src_ + "/model.safetensors", std::ios::binary);
  std::string head(1 << 20, '\0');
  in.read(head.data(), head.size());
  std::ofstream(dir_ / "model.safetensors", std::ios::binary).write(head.data(), head.size());
  auto r = Generate(dir_.string());
  EXPECT_CLEAN_ERROR(r, "DataLoss");
}

TEST_F(GenerateErrors, ShapeDisagreesWithConfig) {
  auto config = Config();
  config["intermediate_size"] = 512;  // the checkpoint's MLP is 768 wide
  WriteConfig(config);
  LinkWeights();
  auto r = Generate(dir_.string());
  EXPECT_CLEAN_ERROR(r, "mlp");
  EXPECT_NE(r.err.find("768"), std::string::npos) << r.err;
}

TEST_F(GenerateErrors, UnknownArchitecture) {
  auto config = Config();
  config["architectures"] = {"FooBarForCausalLM"};
  config["model_type"] = "foobar";
  WriteConfig(config);
  LinkWeights();
  auto r = Generate(dir_.string());
  EXPECT_CLEAN_ERROR(r, "FooBarForCausalLM");
}

TEST_F(GenerateErrors, PromptLongerThanContext) {
  // "The jury said" is 3 tokens; a context of 2 cannot hold it. Both lengths are named.
  auto r = Generate(src_, "--max-model-len 2");
  EXPECT_CLEAN_ERROR(r, "3");
  EXPECT_NE(r.err.find("2"), std::string::npos) << r.err;
}

TEST_F(GenerateErrors, KvPoolTooSmallForOneRequest) {
  std::string prompt;
  for (int i = 0; i < 20; ++i) prompt += "The jury said that the city was quiet. ";
  auto r = RunCommand(std::string(TANDEM_BINARY) + " generate --prompt " + ShellQuote(prompt) +
                          " --max-tokens 4 --num-kv-blocks 2 --block-size 16",
                      120);
  EXPECT_CLEAN_ERROR(r, "InvalidArgument");
}

// tandem run reads the model's sampling defaults (generation_config.json) before it serves: a
// malformed one is refused at start, naming the file and the key; --generation-config vllm skips it.
TEST_F(GenerateErrors, RunRefusesAMalformedGenerationConfigAtStart) {
  LinkWeights();
  WriteConfig(Config());
  fs::remove(dir_ / "generation_config.json");
  std::ofstream(dir_ / "generation_config.json") << R"({"temperature": 0.6, "top_p": 1.5})";
  auto r = RunCommand(std::string(TANDEM_BINARY) + " run --port 0 --model " + ShellQuote(dir_.string()), 120);
  EXPECT_CLEAN_ERROR(r, "generation_config.json: top_p 1.5");
  // A directory that holds no generation_config.json (a typo of auto, say) is refused too.
  auto typo = RunCommand(std::string(TANDEM_BINARY) + " run --port 0 --generation-config AUTO --model " +
                             ShellQuote(dir_.string()),
                         120);
  EXPECT_CLEAN_ERROR(typo, "--generation-config AUTO: no AUTO/generation_config.json");
}

}  // namespace
}  // namespace tandem
