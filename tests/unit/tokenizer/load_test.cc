// Loading: errors for bad inputs, and the configurations other byte-level BPE models use
// (ByteLevel with the GPT-2 regex, ignore_merges, lstrip/rstrip/single_word added tokens).
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "tokenizer/byte_level.h"
#include "tokenizer_test_util.h"

namespace tandem {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/tandem_tok_test_XXXXXX";
    path_ = mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path_); }
  const std::string& path() const { return path_; }
  void Write(const std::string& text) const { std::ofstream(path_ + "/tokenizer.json") << text; }

 private:
  std::string path_;
};

// A tiny byte-level BPE: all 256 bytes, a few merges.
nlohmann::json TinyTokenizer() {
  nlohmann::json vocab = nlohmann::json::object();
  std::vector<std::string> chars;
  int extra = 0;
  for (int b = 0; b < 256; ++b) {
    // Byte-level alphabet: printable bytes as themselves, others shifted to 256+.
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    std::string s;
    const char32_t cp = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + extra++);
    if (cp < 0x80) {
      s.push_back(static_cast<char>(cp));
    } else {
      s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
    vocab[s] = b;
    chars.push_back(s);
  }
  const std::string sp = chars[' '];  // "Ġ"
  vocab["he"] = 256;
  vocab["ll"] = 257;
  vocab["hell"] = 258;
  vocab["hello"] = 259;
  vocab[sp + "w"] = 260;
  vocab["or"] = 261;
  vocab["ld"] = 262;
  vocab["world"] = 263;  // reachable only through ignore_merges
  nlohmann::json j;
  j["version"] = "1.0";
  j["added_tokens"] = nlohmann::json::array(
      {{{"id", 300}, {"content", "<s>"}, {"special", true}, {"lstrip", false}, {"rstrip", false},
        {"normalized", false}, {"single_word", false}},
       {{"id", 301}, {"content", "[M]"}, {"special", true}, {"lstrip", true}, {"rstrip", true},
        {"normalized", false}, {"single_word", false}},
       {{"id", 302}, {"content", "cat"}, {"special", false}, {"lstrip", false}, {"rstrip", false},
        {"normalized", true}, {"single_word", true}}});
  j["normalizer"] = {{"type", "Sequence"}, {"normalizers", nlohmann::json::array({{{"type", "NFC"}}})}};
  j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  j["post_processor"] = nullptr;
  j["decoder"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};
  j["model"] = {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"fuse_unk", false},
                {"byte_fallback", false}, {"vocab", vocab},
                {"merges", nlohmann::json::array({"h e", "l l", "he ll", nlohmann::json::array({"hell", "o"}),
                                                  sp + " w", "o r", "l d"})}};
  return j;
}

TEST(TokenizerLoad, MissingFileIsNotFound) {
  TempDir dir;
  auto r = Tokenizer::Load(dir.path());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound) << r.status().ToString();
  EXPECT_EQ(Tokenizer::Load("/nonexistent/dir").status().code(), StatusCode::kNotFound);
}

TEST(TokenizerLoad, MalformedJsonIsInvalidArgument) {
  TempDir dir;
  for (const char* text : {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0", "", "not json", "[1, 2]", "{}"}) {
    dir.Write(text);
    auto r = Tokenizer::Load(dir.path());
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();
  }
}

TEST(TokenizerLoad, UnsupportedPartsAreNamed) {
  TempDir dir;
  struct Case {
    const char* pointer;
    nlohmann::json value;
    const char* name;
  };
  const Case cases[] = {
      {"/model/type", "WordPiece", "WordPiece"},
      {"/model/type", "Unigram", "Unigram"},
      {"/normalizer", {{"type", "BertNormalizer"}}, "BertNormalizer"},
      {"/pre_tokenizer", {{"type", "Metaspace"}}, "Metaspace"},
      {"/decoder", {{"type", "WordPiece"}}, "WordPiece"},
      {"/model/merges/0", "x y z", "x y z"},
      {"/model/merges/0", "h q", "h q"},
      {"/model/vocab/he", "oops", "oops"},
      {"/pre_tokenizer", {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}}, "(unclosed"},
  };
  for (const Case& c : cases) {
    nlohmann::json j = TinyTokenizer();
    j[nlohmann::json::json_pointer(c.pointer)] = c.value;
    dir.Write(j.dump());
    auto r = Tokenizer::Load(dir.path());
    ASSERT_FALSE(r.ok()) << c.pointer;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(c.name), std::string::npos) << r.status().ToString();
  }
}

TEST(TokenizerLoad, Gpt2StyleByteLevelWithAddedTokenFlags) {
  TempDir dir;
  dir.Write(TinyTokenizer().dump());
  auto r = Tokenizer::Load(dir.path());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const auto& tok = *r.value();
  EXPECT_EQ(tok.vocab_size(), 303);
  // GPT-2 regex: "hello", " world" (no ignore_merges: " w" + o r l d).
  EXPECT_EQ(tok.Encode("hello world"), (std::vector<int32_t>{259, 260, 261, 262}));
  EXPECT_EQ(tok.Decode(tok.Encode("hello world")), "hello world");
  // Special token; lstrip/rstrip swallow the whitespace around [M].
  EXPECT_EQ(tok.Encode("<s>hello", true), (std::vector<int32_t>{300, 259}));
  EXPECT_EQ(tok.Encode("hello  [M]  hello", true), (std::vector<int32_t>{259, 301, 259}));
  // single_word: "cat" only where it is not part of a word.
  EXPECT_EQ(tok.Encode("cat"), std::vector<int32_t>{302});
  EXPECT_EQ(tok.Encode("a cat."), (std::vector<int32_t>{'a', ' ', 302, '.'}));
  EXPECT_FALSE(tok.Encode("cats").front() == 302);

  // ignore_merges: a word that is in the vocab is taken whole.
  nlohmann::json j = TinyTokenizer();
  j["model"]["ignore_merges"] = true;
  dir.Write(j.dump());
  auto r2 = Tokenizer::Load(dir.path());
  ASSERT_TRUE(r2.ok()) << r2.status().ToString();
  EXPECT_EQ(r2.value()->Encode("world"), std::vector<int32_t>{263});
  EXPECT_EQ(r.value()->Encode("world"), (std::vector<int32_t>{'w', 261, 262}));
}

// The vocab index keys strings by their bytes (tokenizer/bpe.h): a literal (not byte-level) string
// and the byte-level string of the same bytes stay two tokens, a string given twice keeps its first
// id, an id given to two strings is found from both and decodes as the last.
TEST(TokenizerLoad, VocabStringsThatShareBytesOrIds) {
  nlohmann::json j = TinyTokenizer();
  const std::string literal = "\xE6\x97\xA5\xE6\x9C\xAC";  // U+65E5 U+672C, not byte-level
  const std::string byte_level = tok::BytesToByteLevel(literal);
  auto& vocab = j["model"]["vocab"];
  vocab[literal] = 270;
  vocab[byte_level] = 271;
  vocab["ab"] = 273;  // nlohmann::json writes keys sorted: "ab" before "ba"
  vocab["ba"] = 273;
  vocab["qq"] = 274;
  std::string text = j.dump();
  const std::string qq = "\"qq\":274";
  ASSERT_NE(text.find(qq), std::string::npos);
  text.replace(text.find(qq), qq.size(), qq + ",\"qq\":275");  // "qq" again, with id 275
  TempDir dir;
  dir.Write(text);
  auto r = Tokenizer::Load(dir.path());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const Tokenizer& t = *r.value();
  EXPECT_EQ(t.TokenToId(literal), 270);
  EXPECT_EQ(t.TokenToId(byte_level), 271);
  EXPECT_EQ(t.TokenBytes(270), literal);
  EXPECT_EQ(t.TokenBytes(271), literal);
  EXPECT_EQ(t.TokenToId("ab"), 273);
  EXPECT_EQ(t.TokenToId("ba"), 273);
  EXPECT_EQ(t.TokenBytes(273), "ba");
  EXPECT_EQ(t.TokenToId("qq"), 274);
  EXPECT_EQ(t.TokenBytes(274), "qq");
  EXPECT_EQ(t.TokenBytes(275), "qq");
  EXPECT_EQ(t.TokenToId("zz"), std::nullopt);
  EXPECT_EQ(t.TokenBytes(272), "");  // an id the vocab does not have
  EXPECT_EQ(t.Encode("hello world"), (std::vector<int32_t>{259, 260, 261, 262}));
}

// Merges are kept in 8 bytes while every id is below 2^21 (tokenizer/bpe.h's MergeTable), in 12
// past that: both encode alike.
TEST(TokenizerLoad, MergesOfIdsPast2To21) {
  nlohmann::json j = TinyTokenizer();
  constexpr int32_t kBig = (1 << 21) + 3;
  auto& vocab = j["model"]["vocab"];
  vocab["hell"] = kBig;
  vocab["hello"] = kBig + 4;
  TempDir dir;
  dir.Write(j.dump());
  auto r = Tokenizer::Load(dir.path());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const Tokenizer& t = *r.value();
  EXPECT_EQ(t.Encode("hello world"), (std::vector<int32_t>{kBig + 4, 260, 261, 262}));
  EXPECT_EQ(t.Encode("hell"), std::vector<int32_t>{kBig});
  EXPECT_EQ(t.Encode("helll"), (std::vector<int32_t>{kBig, 'l'}));
  EXPECT_EQ(t.Decode(t.Encode("hello world")), "hello world");
}

TEST(TokenizerLoad, SplitBehaviors) {
  TempDir dir;
  auto load = [&](const char* behavior, bool invert) {
    nlohmann::json j = TinyTokenizer();
    j["pre_tokenizer"] = {{"type", "Sequence"},
                          {"pretokenizers",
                           nlohmann::json::array({{{"type", "Split"}, {"pattern", {{"String", "-"}}},
                                                   {"behavior", behavior}, {"invert", invert}},
                                                  {{"type", "ByteLevel"}, {"add_prefix_space", false},
                                                   {"use_regex", false}}})}};
    dir.Write(j.dump());
    auto r = Tokenizer::Load(dir.path());
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.value();
  };
  // "he-ll": pieces decide which merges can happen.
  EXPECT_EQ(load("Isolated", false)->Encode("he-ll"), (std::vector<int32_t>{256, '-', 257}));
  EXPECT_EQ(load("Removed", false)->Encode("he-ll"), (std::vector<int32_t>{256, 257}));
  EXPECT_EQ(load("MergedWithPrevious", false)->Encode("he-ll"), (std::vector<int32_t>{256, '-', 257}));
  EXPECT_EQ(load("MergedWithNext", false)->Encode("hel-l"), (std::vector<int32_t>{256, 'l', '-', 'l'}));
  EXPECT_EQ(load("MergedWithNext", false)->Encode("he-ll"), (std::vector<int32_t>{256, '-', 257}));
}

}  // namespace
}  // namespace tandem
