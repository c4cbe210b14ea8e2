// Macros and the scopes they see: a render must not keep its scopes (and the whole render context
// in them) alive after it returns.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "chat/eval.h"
#include "chat/lexer.h"
#include "chat/ast.h"
#include "chat/template.h"

namespace tandem::chat {
namespace {

// Renders `source` with a root scope that holds `payload`; returns a weak reference to the root
// after the evaluator is gone.
std::weak_ptr<Frame> RenderAndForget(const std::string& source, std::string* out) {
  Body body = ParseTemplate(Lex(source));
  auto root = std::make_shared<Frame>();
  AddGlobals(*root);
  (*root)["payload"] = Value::Str(std::string(1 << 16, 'x'));
  std::weak_ptr<Frame> weak = root;
  {
    Evaluator ev(std::move(root));
    ev.Render(body, *out);
  }
  return weak;
}

// Found by tests/fuzz/chat_template_fuzz (LeakSanitizer): the macro held its defining scopes
// strongly and was stored in one of them, so every render of a template defining a macro leaked
// its root scope, the render context with it (each chat request's messages).
TEST(ChatMacroLifetime, RootScopeIsFreedAfterRenderWithMacro) {
  std::string out;
  auto weak = RenderAndForget("{%- macro f(a, b='d') -%}[{{ a ~ b }}]{%- endmacro %}{{ f(1) }}{{ f(2, 'e') }}", &out);
  EXPECT_EQ(out, "[1d][2e]");
  EXPECT_TRUE(weak.expired()) << "the render's root scope outlived it (a reference cycle)";
}

TEST(ChatMacroLifetime, MacroInLoopAndCallBlock) {
  std::string out;
  auto weak = RenderAndForget(
      "{%- for x in [1, 2] %}{%- macro g(y) %}<{{ x }}{{ y }}{{ caller() if caller is defined }}>{%- endmacro %}"
      "{{ g(x) }}{% call g(0) %}c{% endcall %}{%- endfor %}{{ payload | length }}",
      &out);
  EXPECT_EQ(out, "<11><10c><22><20c>65536");
  EXPECT_TRUE(weak.expired());
}

TEST(ChatMacroLifetime, TemplateRenderStillSeesOuterVariables) {
  auto t = ChatTemplate::Parse("{% set greeting = 'hi' %}{% macro m(n) %}{{ greeting }} {{ n }}{{ suffix }}{% endmacro %}{{ m('you') }}");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  auto r = t->Render(nlohmann::ordered_json{{"suffix", "!"}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, "hi you!");
}

}  // namespace
}  // namespace tandem::chat
