// `tandem generate --output json` against Hugging Face's own outputs (tests/golden): prompt ids,
// 32 greedy ids, greedy text and first-step top-5 log-probabilities, for raw and chat prompts.
#include <cmath>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/file_util.h"
#include "subprocess.h"

namespace tandem {
namespace {

using testing::RunCommand;
using testing::ShellQuote;

nlohmann::json Golden() {
  auto j = ReadJsonFile(std::string(TANDEM_GOLDEN_DIR) + "/tiny-qwen3.json");
  EXPECT_TRUE(j.ok()) << j.status().ToString();
  return j.ok() ? *j : nlohmann::json();
}

TEST(GenerateGolden, EveryGenerationCaseMatchesHuggingFace) {
  nlohmann::json golden = Golden();
  ASSERT_TRUE(golden.contains("generation"));
  int checked = 0;
  for (const auto& c : golden["generation"]) {
    std::string args = " generate --output json --top-logprobs 5";
    const auto& greedy = c["greedy_ids"];
    args += " --max-tokens " + std::to_string(greedy.size());
    std::string label;
    if (c["chat"].get<bool>()) {
      args += " --chat";
      const auto& m = c["messages"];
      if (m.is_string()) {
        args += " --prompt " + ShellQuote(m.get<std::string>());
        label = m.get<std::string>();
      } else {
        ASSERT_EQ(m.size(), 2u);
        ASSERT_EQ(m[0]["role"], "system");
        args += " --system " + ShellQuote(m[0]["content"].get<std::string>());
        args += " --prompt " + ShellQuote(m[1]["content"].get<std::string>());
        label = m[1]["content"].get<std::string>();
      }
    } else {
      args += " --prompt " + ShellQuote(c["prompt"].get<std::string>());
      label = c["prompt"].get<std::string>();
    }
    SCOPED_TRACE(label);
    auto r = RunCommand(std::string(TANDEM_BINARY) + args, 300);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    nlohmann::json out = nlohmann::json::parse(r.out);
    EXPECT_EQ(out["prompt_token_ids"], c["prompt_ids"]);
    EXPECT_EQ(out["token_ids"], greedy);
    EXPECT_EQ(out["text"], c["greedy_text"]);
    // A golden sequence shorter than 32 ends on EOS: finish "stop"; else the length bound.
    EXPECT_EQ(out["finish_reason"], greedy.size() < 32 ? "stop" : "length");
    ASSERT_GE(out["top_logprobs"].size(), 1u);
    const auto& top = out["top_logprobs"][0];
    const auto& want = c["top5_first"];
    ASSERT_EQ(top.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(top[i][0], want[i][0]) << "rank " << i;
      EXPECT_NEAR(top[i][1].get<double>(), want[i][1].get<double>(), 1e-3) << "rank " << i;
    }
    ++checked;
  }
  EXPECT_EQ(checked, 8);
}

}  // namespace
}  // namespace tandem
