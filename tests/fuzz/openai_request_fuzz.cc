// OpenAI request bodies (frontend/openai_request.h) as the handlers take them: ParseRequest for
// the endpoint the first byte picks, then, for a valid one, TokenizePrompt with the bundled
// model's tokenizer and chat template (the chat messages rendered, the prompt tokenized and
// checked against the context). Invariants: an error has a status and a message and a JSON body;
// an accepted prompt is non-empty, of ids in the vocabulary, and leaves room for max_tokens.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "chat/template.h"
#include "frontend/openai_request.h"
#include "tokenizer/tokenizer.h"

using namespace tandem;

namespace {

void Check(bool ok, const char* what) {
  if (!ok) {
    fprintf(stderr, "openai_request_fuzz: invariant broken: %s\n", what);
    abort();
  }
}

struct Model {
  std::shared_ptr<const Tokenizer> tokenizer;
  std::unique_ptr<ChatRenderer> renderer;
  int max_token_bytes = 0;
};

const Model& TheModel() {
  static Model* m = [] {
    auto* m = new Model;
    auto tok = Tokenizer::Load(TANDEM_DEFAULT_MODEL_DIR);
    auto renderer = ChatRenderer::Load(TANDEM_DEFAULT_MODEL_DIR);
    if (!tok.ok() || !renderer.ok()) {
      fprintf(stderr, "openai_request_fuzz: cannot load the bundled model at %s (make unpacks it)\n",
              TANDEM_DEFAULT_MODEL_DIR);
      abort();
    }
    m->tokenizer = *tok;
    m->renderer = std::make_unique<ChatRenderer>(std::move(renderer).value());
    m->max_token_bytes = openai::MaxTokenBytes(*m->tokenizer);
    return m;
  }();
  return *m;
}

void CheckError(const openai::ApiError& e) {
  Check(e.status >= 400 && e.status < 600, "an error status outside 4xx/5xx");
  Check(!e.message.empty(), "an error without a message");
  auto body = nlohmann::json::parse(e.Body(), nullptr, false);
  Check(!body.is_discarded() && body.contains("error"), "an error body that is not JSON");
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  TheModel();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const Model& model = TheModel();
  const auto endpoint = (data[0] & 1) ? openai::Endpoint::kCompletions : openai::Endpoint::kChatCompletions;
  std::string body(reinterpret_cast<const char*>(data) + 1, size - 1);
  openai::ParseOptions options;
  options.served_model_name = "tiny-qwen3";
  options.tool_call_format = chat_parse::ToolCallFormat::kHermes;  // the bundled template's parser
  openai::ParsedRequest request;
  if (auto e = openai::ParseRequest(endpoint, body, options, &request)) {
    CheckError(*e);
    return 0;
  }
  Check(request.n >= 1 && request.n <= options.max_n, "n out of range");
  constexpr int kMaxModelLen = 512;
  std::vector<int32_t> ids;
  std::string echo;
  if (auto e = openai::TokenizePrompt(&request, *model.tokenizer, model.renderer.get(), kMaxModelLen, &ids,
                                      &echo, model.max_token_bytes)) {
    CheckError(*e);
    return 0;
  }
  Check(!ids.empty(), "an empty prompt accepted");
  Check(static_cast<int>(ids.size()) < kMaxModelLen, "a prompt of the whole context accepted");
  for (int32_t id : ids) Check(id >= 0 && id < model.tokenizer->vocab_size(), "a prompt id out of the vocabulary");
  Check(request.params.max_tokens >= 0 &&
            static_cast<int64_t>(ids.size()) + request.params.max_tokens <= kMaxModelLen,
        "max_tokens beyond the context");
  return 0;
}
