// Differential test against Hugging Face's JavaScript port (@huggingface/tokenizers, installed by
// scripts/test-setup.sh into tests/tools/node_modules): a few thousand strings from a fixed seed,
// run through tests/tools/hf_tokenize.mjs in one node process, compared id by id.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>

#include "tokenizer_test_util.h"
#include "tokenizer/utf8.h"

namespace tandem {
namespace {

using testing::QwenTokenizer;

std::string Utf8(char32_t cp) {
  std::string s;
  tok::AppendCodePoint(cp, &s);
  return s;
}

// Generates mixed-script text from a fixed seed.
class TextGenerator {
 public:
  explicit TextGenerator(uint32_t seed) : rng_(seed) {}

  std::string Next() {
    std::string s;
    const int parts = Uniform(1, 10);
    for (int i = 0; i < parts; ++i) {
      s += Fragment();
      if (Uniform(0, 2) == 0) s += Pick(kSeparators);
    }
    return s;
  }

 private:
  int Uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  template <size_t N>
  std::string Pick(const char* const (&list)[N]) {
    return list[Uniform(0, static_cast<int>(N) - 1)];
  }
  std::string RandomFrom(char32_t lo, char32_t hi, int count) {
    std::string s;
    for (int i = 0; i < count; ++i) s += Utf8(static_cast<char32_t>(Uniform(static_cast<int>(lo), static_cast<int>(hi))));
    return s;
  }

  std::string Fragment() {
    switch (Uniform(0, 17)) {
      case 0: return Pick(kWords);
      case 1: return Pick(kContractions);
      case 2: return RandomFrom(0x4E00, 0x9FFF, Uniform(1, 8));    // CJK ideographs
      case 3: return RandomFrom(0x3041, 0x30FF, Uniform(1, 6));    // kana
      case 4: return RandomFrom(0x0621, 0x064A, Uniform(1, 8));    // Arabic letters
      case 5: return RandomFrom(0x0905, 0x0939, Uniform(1, 4)) + Utf8(0x093F) + Utf8(0x094D) +
                     RandomFrom(0x0915, 0x0939, 1);               // Devanagari with signs
      case 6: {                                                   // combining marks that NFC composes
        static const char32_t bases[] = {'e', 'a', 'o', 'u', 'n', 'c', 'E', 'A', 'i'};
        static const char32_t marks[] = {0x0301, 0x0300, 0x0308, 0x0303, 0x0327, 0x0302, 0x030A, 0x0323};
        std::string s;
        for (int i = Uniform(1, 4); i > 0; --i) {
          s += Utf8(bases[Uniform(0, 8)]);
          for (int m = Uniform(1, 2); m > 0; --m) s += Utf8(marks[Uniform(0, 7)]);
        }
        return s;
      }
      case 7: return Utf8(0x1100 + Uniform(0, 18)) + Utf8(0x1161 + Uniform(0, 20)) +
                     (Uniform(0, 1) ? Utf8(0x11A8 + Uniform(0, 26)) : std::string());  // Hangul jamo
      case 8: return Pick(kEmoji);
      case 9: return Pick(kWhitespace);
      case 10: return std::to_string(std::uniform_int_distribution<int64_t>(0, 1LL << 40)(rng_));
      case 11: return Pick(kCode);
      case 12: return Pick(kSpecialish);
      case 13: return RandomFrom(0x0391, 0x03C9, Uniform(1, 6));  // Greek
      case 14: return RandomFrom(0x0410, 0x044F, Uniform(1, 8));  // Cyrillic
      case 15: return RandomFrom(0x21, 0x7E, Uniform(1, 12));     // ASCII punctuation soup
      case 16: return RandomFrom(0xA0, 0x24F, Uniform(1, 5));     // Latin-1 / Latin Extended
      default: return Pick(kMixed);
    }
  }

  static constexpr const char* kWords[] = {"Hello", "world", "the", "The", "tokenizer", "running", "München",
                                           "naïve", "Ωmega", "HTTP", "don", "x", "I", "A", "supercalifragilistic"};
  static constexpr const char* kContractions[] = {"I'm", "you're", "they've", "it'll", "we'd", "DON'T", "She'S",
                                                  "'s", "'LL", "o'clock", "rock'n'roll", "'"};
  static constexpr const char* kEmoji[] = {
      "😀", "🎉", "👍🏽", "👍🏿", "🇺🇸", "🇯🇵🇫🇷", "👨‍👩‍👧‍👦", "🏳️‍🌈", "❤️", "🤷🏻‍♀️", "✊🏾", "🧑‍💻", "☕", "1️⃣", "🫠"};
  static constexpr const char* kWhitespace[] = {" ",   "  ",   "    ", "\t",   "\n",         "\n\n",       "\r\n",
                                                "\r\n\r\n", " \n ", "\t\t ", "\u00A0", "\u3000",     "\u2003\u2009",
                                                "\u202F", "\u2028", "\u0085", "\u200B", "\u180E", "\uFEFF", " \u00A0 "};
  static constexpr const char* kCode[] = {"def f(x):\n    return x**2", "int main() { return 0; }", "a[i] += b;",
                                          "x = {'k': [1, 2.5e-3]}", "#include <vector>", "if (a && b || !c) {}",
                                          "https://example.com/a?b=c&d=e", "path/to/file.txt", "0x7FFF_FFFF",
                                          "SELECT * FROM t WHERE id=42;", "</div><div class=\"x\">", "$$\\frac{a}{b}$$"};
  static constexpr const char* kSpecialish[] = {"<|im_end|>", "<|im_start|>", "<|endoftext|>", "<|im_end",
                                                "im_end|>",   "<|im_start|>user\n", "<think>", "</think>",
                                                "<tool_call>", "<|im_end|><|im_end|>", "<<|im_end|>>", "<|fim_prefix|>",
                                                "<|IM_END|>", "< |im_end| >", "<|vision_start|>", "<|box_end|>"};
  static constexpr const char* kMixed[] = {"café", "résumé", "日本語のテキスト", "中文，测试！", "مرحبا بالعالم",
                                           "नमस्ते दुनिया", "Ünïcödé", "ﬁ ligature", "ｆｕｌｌｗｉｄｔｈ", "½ ² ③",
                                           "Straße", "İstanbul", "ǅ ǈ", "...", "---", "!!!???", "１２３"};
  static constexpr const char* kSeparators[] = {" ", "", "\n", ", ", ". ", "  ", "\t", "-", "_"};

  std::mt19937 rng_;
};

struct Oracle {
  nlohmann::json result;
  std::string skip_reason;
};

Oracle RunOracle(const nlohmann::json& input) {
  Oracle o;
  const std::string tools = std::string(TANDEM_TESTS_DIR) + "/tools";
  if (!std::filesystem::exists(tools + "/node_modules/@huggingface/tokenizers")) {
    o.skip_reason = "tests/tools/node_modules missing: run scripts/test-setup.sh";
    return o;
  }
  if (std::system("node --version > /dev/null 2>&1") != 0) {
    o.skip_reason = "node not found";
    return o;
  }
  char path[] = "/tmp/tandem_tok_diff_XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) {
    o.skip_reason = "cannot create a temp file";
    return o;
  }
  close(fd);
  {
    std::ofstream f(path);
    f << input.dump();
  }
  const std::string cmd = "node '" + tools + "/hf_tokenize.mjs' '" + DefaultModelDir() + "' '" + path + "'";
  std::string out;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
    const int rc = pclose(p);
    EXPECT_EQ(rc, 0) << cmd;
  }
  std::remove(path);
  try {
    o.result = nlohmann::json::parse(out);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "bad oracle output: " << e.what() << "\n" << out.substr(0, 500);
  }
  return o;
}

std::string Show(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += std::to_string(id) + " ";
  return s;
}

TEST(TokenizerDifferential, MatchesHuggingFaceJs) {
  auto tok = QwenTokenizer();
  ASSERT_TRUE(tok);
  constexpr int kNumStrings = 3000;
  TextGenerator gen(20240611);
  std::vector<std::pair<std::string, bool>> cases;
  for (int i = 0; i < kNumStrings; ++i) cases.emplace_back(gen.Next(), i % 3 != 2);  // 2/3 parse_special
  // Fixed cases of note.
  for (const char* s : {"<|im_end|>", "a<|im_end|>b", "<|im_start|>user\nhi<|im_end|>\n", "<|im_end", "<think>x</think>",
                        "\u180E", "a\u180Eb", "a \uFEFF b", "x\u0085y", "  \u0085  z"}) {
    cases.emplace_back(s, true);
    cases.emplace_back(s, false);
  }
  // Random id sequences to decode (multi-byte characters cut between tokens, special tokens).
  std::mt19937 rng(7);
  std::vector<std::pair<std::vector<int32_t>, bool>> decodes;
  for (int i = 0; i < 300; ++i) {
    std::vector<int32_t> ids;
    for (int k = std::uniform_int_distribution<int>(1, 12)(rng); k > 0; --k) {
      ids.push_back(std::uniform_int_distribution<int32_t>(0, tok->vocab_size() - 1)(rng));
    }
    decodes.emplace_back(ids, i % 2 == 0);
  }

  nlohmann::json input;
  input["encode"] = nlohmann::json::array();
  for (const auto& [text, special] : cases) input["encode"].push_back({{"text", text}, {"parse_special", special}});
  input["decode"] = nlohmann::json::array();
  for (const auto& [ids, skip] : decodes) input["decode"].push_back({{"ids", ids}, {"skip_special_tokens", skip}});

  Oracle oracle = RunOracle(input);
  if (!oracle.skip_reason.empty()) GTEST_SKIP() << oracle.skip_reason;
  ASSERT_TRUE(oracle.result.contains("encode"));
  const auto& hf = oracle.result["encode"];
  ASSERT_EQ(hf.size(), cases.size());
  int mismatches = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto& [text, special] = cases[i];
    const auto ours = tok->Encode(text, special);
    const auto theirs = hf[i].get<std::vector<int32_t>>();
    if (ours != theirs) {
      if (++mismatches <= 10) {
        ADD_FAILURE() << "parse_special=" << special << " text=" << nlohmann::json(text).dump()
                      << "\n  ours:   " << Show(ours) << "\n  HF JS:  " << Show(theirs);
      }
    }
  }
  EXPECT_EQ(mismatches, 0) << "of " << cases.size() << " strings";
  std::printf("differential encode: %zu strings, %d mismatches\n", cases.size(), mismatches);

  const auto& hf_dec = oracle.result["decode"];
  ASSERT_EQ(hf_dec.size(), decodes.size());
  int dec_mismatches = 0;
  for (size_t i = 0; i < decodes.size(); ++i) {
    const std::string ours = tok->Decode(decodes[i].first, decodes[i].second);
    const std::string theirs = hf_dec[i].get<std::string>();
    if (ours != theirs && ++dec_mismatches <= 10) {
      ADD_FAILURE() << "decode ids=" << Show(decodes[i].first) << " skip=" << decodes[i].second
                    << "\n  ours:  " << nlohmann::json(ours).dump() << "\n  HF JS: " << nlohmann::json(theirs).dump();
    }
  }
  EXPECT_EQ(dec_mismatches, 0) << "of " << decodes.size() << " id sequences";
  std::printf("differential decode: %zu sequences, %d mismatches\n", decodes.size(), dec_mismatches);
}

}  // namespace
}  // namespace tandem
