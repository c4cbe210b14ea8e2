// Errors: unsupported constructs are InvalidArgument naming the construct and line; malformed
// templates fail cleanly (never crash); raise_exception's message is the error.
#include <random>


#include <gtest/gtest.h>

#include "chat/template.h"
#include "chat_test_util.h"

namespace tandem {
namespace {

using chat_test::ojson;

Status ParseError(const std::string& src) {
  auto t = ChatTemplate::Parse(src);
  if (t.ok()) return Status();
  return t.status();
}

Status RenderError(const std::string& src, const ojson& ctx = ojson::object(),
                   const ChatTemplateLimits& limits = {}) {
  auto t = ChatTemplate::Parse(src);
  if (!t.ok()) return t.status();
  auto r = t->Render(ctx, limits);
  if (r.ok()) return Status();
  return r.status();
}

TEST(ChatErrorTest, UnsupportedFilterNamesItAndTheLine) {
  std::string src;
  for (int k = 1; k < 12; ++k) src += "line " + std::to_string(k) + "\n";
  src += "{{ messages | xyz }}";
  Status st = ParseError(src);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "unsupported filter 'xyz' at line 12");
}

TEST(ChatErrorTest, UnsupportedTagAndTest) {
  Status st = ParseError("a\n{% include 'x.html' %}");
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "unsupported tag 'include' at line 2");
  st = ParseError("{% if x is frobnicated %}{% endif %}");
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "unsupported test 'frobnicated' at line 1");
  EXPECT_NE(ParseError("{% for x in y recursive %}{% endfor %}").message().find("recursive"), std::string::npos);
  EXPECT_NE(ParseError("{% extends 'base' %}").message().find("'extends'"), std::string::npos);
}

TEST(ChatErrorTest, UnknownMethodIsARenderErrorWithLine) {
  Status st = RenderError("\n\n{{ 'abc'.frob() }}");
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "unsupported method 'frob' on str at line 3");
}

TEST(ChatErrorTest, RaiseExceptionMessagePropagates) {
  Status st = RenderError("{% if messages[0].role != 'user' %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}",
                          ojson::parse(R"({"messages": [{"role": "system"}]})"));
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "Conversation roles must alternate user/assistant/user/assistant/...");
}

// An error whose message says nothing is named as such (the chat_template fuzzer found
// raise_exception() giving an empty message); a keyword message is the message too.
TEST(ChatErrorTest, RaiseExceptionWithoutAMessageStillSaysWhat) {
  Status st = RenderError("{{ raise_exception() }}");
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("missing 1 required positional argument: 'message'"), std::string::npos)
      << st.message();
  st = RenderError("{{ raise_exception('') }}");
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("empty message"), std::string::npos) << st.message();
  st = RenderError("{{ raise_exception(message='bad role') }}");
  EXPECT_EQ(st.message(), "bad role");
}

// An empty string or list repeated any number of times is empty at once (the chat_template fuzzer:
// '' * 35**7 looped 6 x 10^10 times; the size caps pass for an empty unit).
TEST(ChatErrorTest, RepeatingNothingIsQuickAndEmpty) {
  auto t = ChatTemplate::Parse("[{{ '' * 35**7 }}|{{ ([] * 9223372036854775807) | length }}|{{ 'ab' * 0 * 35**7 }}]");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  auto r = t->Render(ojson::object());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, "[|0|]");
}

// Deeply nested expressions are errors, not a stack overflow: 2,800 unary signs overflowed the
// evaluator's stack under ASan (a chat_template fuzzer input); parentheses, `not` and a long
// left-deep chain of additions are bounded the same way. Moderate nesting still renders, as jinja2.
TEST(ChatErrorTest, DeeplyNestedExpressionsAreErrors) {
  const std::string signs(5000, '-'), opens(3000, '('), closes(3000, ')');
  std::string nots, chain = "1";
  for (int i = 0; i < 3000; ++i) nots += "not ";
  for (int i = 0; i < 3000; ++i) chain += "+1";
  for (const std::string& src : {"{{ " + signs + "1 }}", "{{ " + opens + "1" + closes + " }}",
                                 "{{ " + nots + "1 }}", "{{ " + chain + " }}", "{{ [" + opens + "1" + closes + "] }}"}) {
    SCOPED_TRACE(src.substr(0, 40));
    Status st = RenderError(src);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find("nested too deeply"), std::string::npos) << st.message();
  }
  // As jinja2 (Python 3.11, jinja2's own recursion, which fails with a RecursionError from about
  // 100 parentheses or 500 additions on): 200 signs are 1, 201 are -1, 50 parentheses and a chain of
  // 100 additions plain values.
  auto render = [](const std::string& src) {
    auto t = ChatTemplate::Parse(src);
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    if (!t.ok()) return std::string("<parse error>");
    auto r = t->Render(ojson::object());
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : std::string("<render error>");
  };
  std::string chain100 = "1";
  for (int i = 0; i < 99; ++i) chain100 += "+1";
  EXPECT_EQ(render("{{ " + std::string(200, '-') + "1 }}"), "1");
  EXPECT_EQ(render("{{ " + std::string(201, '-') + "1 }}"), "-1");
  EXPECT_EQ(render("{{ " + std::string(50, '(') + "7" + std::string(50, ')') + " }}"), "7");
  EXPECT_EQ(render("{{ " + chain100 + " }}"), "100");
}

// Python's integers are unbounded, ours are 64-bit: a result past int64 is an error naming the
// operator (found by the chat_template fuzzer as signed overflow, undefined behaviour in C++).
TEST(ChatErrorTest, IntegerOverflowIsAnError) {
  for (const char* src : {"{{7717**7}}", "{{ 2 ** 63 }}", "{{ 9223372036854775807 + 1 }}", "{{ -9223372036854775807 - 2 }}",
                          "{{ 3037000500 * 3037000500 }}", "{{ (-9223372036854775807 - 1) // -1 }}", "{{ -(-9223372036854775807 - 1) }}",
                          "{{ 3 ** 9223372036854775807 }}"}) {
    SCOPED_TRACE(src);
    Status st = RenderError(src);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find("integer overflow"), std::string::npos) << st.message();
  }
}

TEST(ChatErrorTest, OutputBeyondTheBudgetIsAnError) {
  // Output that doubles with each nesting level: 2^30 KiB within the call-depth limit. jinja2 would
  // run until memory ran out; here it stops at kMaxTemplateOutputBytes (fuzzer find, 20 s for 3.7 KB).
  const std::string kib(1024, 'x');
  Status st = RenderError("{%- macro f(n) -%}{%- if n > 0 -%}{{ f(n - 1) }}{{ f(n - 1) }}{%- else -%}" + kib +
                          "{%- endif -%}{%- endmacro -%}{{ f(30) }}");
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("MiB of output"), std::string::npos) << st.message();
  // A large but bounded rendering is fine: 1 MiB written through 11 levels (11 MiB counted).
  auto t = ChatTemplate::Parse("{%- macro g(n) -%}{%- if n > 0 -%}{{ g(n - 1) }}{{ g(n - 1) }}{%- else -%}" +
                               kib + "{%- endif -%}{%- endmacro -%}{{ g(10) }}");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  auto ok = t->Render(ojson::object());
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->size(), size_t{1} << 20);
}

TEST(ChatErrorTest, StringsBeyondTheCapAreErrors) {
  // Each grows a value past kMaxTemplateStringBytes (16 MiB) before anything is output; jinja2 would
  // build them until memory ran out. Fuzzer find: chained joins, 12 s for a 592-byte template under
  // ASan (corpus regress-string-cap).
  const char* grow[] = {
      "{{ 'x' * 100000000000 }}",
      "{% set ns = namespace(s='ab') %}{% for i in range(60) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s | length }}",
      "{% set ns = namespace(s='ab') %}{% for i in range(60) %}{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s | length }}",
      "{{ 'abcdefgh' | join('0123456789abcdef') | join('0123456789abcdef') | join('0123456789abcdef') | "
      "join('0123456789abcdef') | join('0123456789abcdef') | join('0123456789abcdef') | length }}",
      "{{ ('a' * 1000000) | replace('a', 'bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb') | length }}",
      "{{ ('a' * 1000000).replace('a', 'bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb') | length }}",
      "{{ 'x' | indent(100000000000) }}",
      "{{ [1, [2]] | tojson(indent=100000000000) }}",
      "{{ ([['y' * 10000000]] * 3) | tojson | length }}",
      "{{ (['y' * 10000000] * 3) | string | length }}",
  };
  for (const char* t : grow) {
    SCOPED_TRACE(t);
    Status st = RenderError(t);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find("more than 16 MiB"), std::string::npos) << st.message();
  }
  // A repr of a repr of ... doubles its backslashes each time (corpus regress-repr-cap: 6.8 s under
  // ASan on the loaded machine before repr wrote runs of escapes at once, 3.0 s after).
  {
    Status st = RenderError(
        "{% set ns = namespace(s='\\\\') %}{% for i in range(40) %}{% set ns.s = [ns.s] | string %}{% endfor %}");
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find("more than 16 MiB"), std::string::npos) << st.message();
  }
  // Work without output: loops, and values per character or per item, are bounded too.
  const std::pair<const char*, const char*> work[] = {
      {"{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}", "M steps"},
      {"{% for c in 'x' * 2000000 %}{% endfor %}", "iterating over a string of more than 1 MiB"},
      {"{{ ('x' * 2000000) | join('', attribute='a') | length }}", "iterating over a string of more than 1 MiB"},
      {"{{ (['a'] * 2000000) | length }}", "a list of more than 1M items"},
      {"{{ (['x'] * 100000000000) | length }}", "a list of more than 1M items"},
  };
  for (const auto& [t, what] : work) {
    SCOPED_TRACE(t);
    Status st = RenderError(t);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find(what), std::string::npos) << st.message();
  }
  // Within the cap: 8 MiB strings are values like any other.
  auto t = ChatTemplate::Parse("{{ ('x' * 8388608) | length }} {{ ('ab' * 4194304 ~ 'c') | length }}");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  auto ok = t->Render(ojson::object());
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(*ok, "8388608 8388609");
}

// Smaller limits (the chat_template fuzzer renders with 1/16 of the defaults) stop a render with the
// same errors, naming the smaller bound; the defaults are the limits above. (Strings at 2 MiB here,
// not 1 MiB, so that a string can pass the small iteration limit and not the default one.)
TEST(ChatErrorTest, SmallerLimitsGiveTheSameErrors) {
  ChatTemplateLimits small;
  small.max_string_bytes = size_t{2} << 20;
  small.max_output_bytes = size_t{1} << 20;
  small.max_iterated_items = size_t{1} << 16;
  small.max_steps = int64_t{1} << 17;
  const ChatTemplateLimits defaults;
  EXPECT_EQ(defaults.max_string_bytes, size_t{16} << 20);
  EXPECT_EQ(defaults.max_output_bytes, size_t{16} << 20);
  EXPECT_EQ(defaults.max_iterated_items, size_t{1} << 20);
  EXPECT_EQ(defaults.max_steps, int64_t{2} << 20);
  const auto replaced = [](std::string s, const std::string& from, const std::string& to) {
    const size_t at = s.find(from);
    if (at != std::string::npos) s.replace(at, from.size(), to);
    return s;
  };
  const std::string kib(1024, 'x');
  struct Case {
    std::string beyond_both;   // fails with either
    std::string between;       // renders with the defaults, fails with `small`
    const char* default_text;  // the bound as the default error names it
    const char* small_text;    // ... and as the small one does
  };
  const Case cases[] = {
      {"{{ 'x' * 100000000000 }}", "{{ ('x' * 3000000) | length }}", "16 MiB", "2 MiB"},
      {"{% set ns = namespace(s='ab') %}{% for i in range(60) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
       "{{ ('ab' * 1100000 ~ 'c') | length }}", "16 MiB", "2 MiB"},
      {"{{ ([['y' * 500000]] * 40) | tojson | length }}", "{{ ([['y' * 500000]] * 5) | tojson | length }}", "16 MiB",
       "2 MiB"},
      {"{%- macro f(n) -%}{%- if n > 0 -%}{{ f(n - 1) }}{{ f(n - 1) }}{%- else -%}" + kib +
           "{%- endif -%}{%- endmacro -%}{{ f(30) }}",
       "{% for i in range(2048) %}" + kib + "{% endfor %}", "16 MiB", "1 MiB"},
      {"{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}",
       "{% for a in range(400) %}{% for b in range(400) %}{% endfor %}{% endfor %}", "2M steps", "131072 steps"},
      {"{% for c in 'x' * 2000000 %}{% endfor %}", "{% for c in 'x' * 100000 %}{% endfor %}", "1 MiB", "64 KiB"},
      {"{{ (['x'] * 100000000000) | length }}", "{{ (['a'] * 100000) | length }}", "1M items", "65536 items"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.beyond_both);
    const Status with_defaults = RenderError(c.beyond_both);
    ASSERT_EQ(with_defaults.code(), StatusCode::kInvalidArgument);
    ASSERT_NE(with_defaults.message().find(c.default_text), std::string::npos) << with_defaults.message();
    const Status with_small = RenderError(c.beyond_both, ojson::object(), small);
    EXPECT_EQ(with_small.code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(with_small.message(), replaced(with_defaults.message(), c.default_text, c.small_text));
    SCOPED_TRACE(c.between);
    EXPECT_TRUE(RenderError(c.between).ok()) << RenderError(c.between).ToString();
    const Status between_small = RenderError(c.between, ojson::object(), small);
    EXPECT_EQ(between_small.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(between_small.message().find(c.small_text), std::string::npos)
        << between_small.message();
  }
  // The limits last for their render only: the defaults again after a failed one on this thread.
  EXPECT_FALSE(RenderError("{{ ('x' * 3000000) | length }}", ojson::object(), small).ok());
  auto t = ChatTemplate::Parse("{{ ('x' * 3000000) | length }}");
  ASSERT_TRUE(t.ok());
  auto r = t->Render(ojson::object());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, "3000000");
}

TEST(ChatErrorTest, UndefinedErrorsNameTheVariable) {
  Status st = RenderError("\n{{ foo.bar }}");
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "'foo' is undefined at line 2");
}

TEST(ChatErrorTest, MalformedTemplatesAreErrors) {
  const char* bad[] = {
      "{{ x",          "{{ x }",       "{% if x %}",     "{% if x",           "{# comment",
      "{{ 'abc }}",    "{% for x in y %}", "{% endif %}",  "{{ }}",             "{% %}",
      "{{ (1, 2 }}",   "{{ [1, 2 }}",  "{{ {'a': 1 }}",  "{% set %}",         "{% if %}{% endif %}",
      "{{ x | }}",     "{{ x. }}",     "{{ 1 + }}",      "{% else %}",        "{% for %}{% endfor %}",
      "{% macro %}{% endmacro %}", "{% break %}", "{{ x[ }}", "{{ f(a=1, 2) }}",  "{% raw %}never ends",
      "{{ '\\x4 }}",   "{% if x %}{% elif %}{% endif %}", "{{ x is }}", "{% set x = %}", "{{ @ }}",
  };
  for (const char* src : bad) {
    SCOPED_TRACE(src);
    Status st = ParseError(src);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
    EXPECT_NE(st.message().find("line"), std::string::npos) << st.message();
  }
}

// Random cuts and splices of the Qwen3 template: every result parses or fails cleanly, and every
// parsed template renders or fails cleanly.
TEST(ChatErrorTest, MangledTemplatesNeverCrash) {
  const std::string src = chat_test::Qwen3Template();
  ASSERT_FALSE(src.empty());
  const ojson ctx = ojson::parse(R"({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "<think>x</think>y"}],
      "add_generation_prompt": true, "tools": [{"a": 1}]})");
  std::mt19937 rng(1234);
  int parsed = 0;
  for (int k = 0; k < 400; ++k) {
    std::uniform_int_distribution<size_t> pos(0, src.size());
    size_t a = pos(rng), b = pos(rng);
    if (a > b) std::swap(a, b);
    std::string mangled = (k % 2) ? src.substr(0, a) + src.substr(b) : src.substr(a, b - a);
    auto t = ChatTemplate::Parse(mangled);
    if (!t.ok()) {
      EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
      continue;
    }
    ++parsed;
    auto r = t->Render(ctx);
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    }
  }
  EXPECT_GT(parsed, 0);
}

}  // namespace
}  // namespace tandem
