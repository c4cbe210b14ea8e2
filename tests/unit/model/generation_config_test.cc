// LoadSamplingDefaults (model/generation_config.h): the sampling keys of generation_config.json,
// as vLLM's --generation-config auto reads them; the file is Qwen/Qwen3-8B's as published.
#include "model/generation_config.h"

#include <gtest/gtest.h>

#include "model_files_util.h"

namespace tandem {
namespace {

using testing::TempDir;
using testing::WriteText;

TEST(SamplingDefaults, Qwen3sGenerationConfig) {
  TempDir dir;
  WriteText(dir.file("generation_config.json"), R"({
  "bos_token_id": 151643,
  "do_sample": true,
  "eos_token_id": [151645, 151643],
  "pad_token_id": 151643,
  "temperature": 0.6,
  "top_k": 20,
  "top_p": 0.95,
  "transformers_version": "4.51.0"
})");
  auto d = LoadSamplingDefaults(dir.path());
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_FLOAT_EQ(*d->temperature, 0.6f);
  EXPECT_EQ(*d->top_k, 20);
  EXPECT_FLOAT_EQ(*d->top_p, 0.95f);
  EXPECT_FALSE(d->min_p.has_value());
  EXPECT_FALSE(d->repetition_penalty.has_value());
  EXPECT_EQ(d->ToString(), "temperature=0.6 top_k=20 top_p=0.95");
  EXPECT_FALSE(d->max_tokens.has_value());
}

TEST(SamplingDefaults, MaxNewTokensIsTheMaxTokensCap) {
  TempDir dir;
  WriteText(dir.file("generation_config.json"), R"({"max_new_tokens": 512})");
  auto d = LoadSamplingDefaults(dir.path());
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(*d->max_tokens, 512);
  EXPECT_FALSE(d->empty());
  EXPECT_EQ(d->ToString(), "max_new_tokens=512");
}

TEST(SamplingDefaults, NoFileOrNoSamplingKeysGiveNone) {
  TempDir dir;
  auto none = LoadSamplingDefaults(dir.path());
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
  // The bundled tiny model's kind: do_sample false, no sampling keys; nulls count as absent.
  WriteText(dir.file("generation_config.json"),
            R"({"do_sample": false, "eos_token_id": 151645, "temperature": null})");
  auto d = LoadSamplingDefaults(dir.path());
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_TRUE(d->empty());
  EXPECT_EQ(d->ToString(), "none");
}

TEST(SamplingDefaults, BadValuesNameTheFileAndKey) {
  TempDir dir;
  for (const char* body : {R"({"top_p": 1.5})", R"({"top_p": 0})", R"({"temperature": -1})",
                           R"({"top_k": 2.5})", R"({"top_k": -2})", R"({"min_p": "0.1"})",
                           R"({"repetition_penalty": 0})", R"([1, 2])", "{not json",
                           R"({"top_p": 1e-50})",                    // 0 as a float
                           R"({"repetition_penalty": 1e-50})",
                           R"({"top_k": 18446744073709551615})",     // not -1 as int64
                           R"({"top_k": 1073741825})",
                           R"({"temperature": 0.6, "unrelated": 1e400})",  // no double holds it
                           R"({"max_new_tokens": 0})", R"({"max_new_tokens": 2.5})"}) {
    WriteText(dir.file("generation_config.json"), body);
    auto d = LoadSamplingDefaults(dir.path());
    ASSERT_FALSE(d.ok()) << body;
    EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument) << body;
    EXPECT_NE(d.status().message().find("generation_config.json"), std::string::npos) << body;
  }
}

}  // namespace
}  // namespace tandem
