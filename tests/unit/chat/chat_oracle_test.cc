// Small synthetic templates, one construct each, rendered by us and by Python's jinja2 (the
// oracle, tests/tools/render_jinja.py): the outputs must be byte-identical, or both must fail.
#include <gtest/gtest.h>

#include "chat_test_util.h"

namespace tandem {
namespace {

using chat_test::ojson;
using chat_test::OracleCase;

const char* kCtx = R"({
  "messages": [{"role": "system", "content": "Sys"}, {"role": "user", "content": "Hello there"},
               {"role": "assistant", "content": "  Hi!  "}, {"role": "user", "content": "Ünïcödé 😀 end"}],
  "xs": [3, 1, 2], "words": ["b", "A", "c", "a", "B"], "empty": [], "n": 7, "f": 2.5, "s": "Hello, World",
  "d": {"b": 2, "a": 1, "C": 3}, "nested": {"k": {"v": [10, 20, 30]}}, "t": true, "nul": null,
  "people": [{"name": "ann", "age": 31, "tags": ["x"]}, {"name": "bob", "age": 25}, {"name": "Cy", "age": 40, "tags": []}],
  "obj": {"z": 1, "y": [1, 2.0, "é\n\"q\"", null, true], "x": {"w": {}}, "v": []}
})";

std::vector<OracleCase> Cases(const std::vector<std::pair<std::string, std::string>>& named) {
  const ojson ctx = ojson::parse(kCtx);
  std::vector<OracleCase> out;
  for (const auto& [name, src] : named) out.push_back({name, src, ctx});
  return out;
}

TEST(ChatOracleTest, WhitespaceControl) {
  chat_test::ExpectMatchesOracle(Cases({
      {"lstrip+trim", "a\n  {% if t %}\n    b\n  {% endif %}\nc"},
      {"nested blocks", "<\n{% for x in xs %}\n  {% if x > 1 %}\n    [{{ x }}]\n  {% else %}\n    ({{ x }})\n  {% endif %}\n{% endfor %}\n>"},
      {"minus both sides", "a  \n  {%- if t -%}  \n  b  \n  {%- endif -%}  \n  c"},
      {"minus on output", "a  {{- s -}}  b\n  {{ n }}  \n"},
      {"comments", "x\n  {# a comment #}\ny {# inline #} z\n{#- strip -#}\n   w"},
      {"comment at line start after tag", "{% if t %}\n{# c #}\n  {# d #}\nq{% endif %}"},
      {"plus disables lstrip", "a\n  {%+ if t %}b{% endif %}\n"},
      {"plus disables trim", "{% if t +%}\nb{% endif %}"},
      {"text before tag on same line", "{{ n }}  {% if t %}x{% endif %}\n  {% if t %}y{% endif %}"},
      {"tag after tag", "{% if t %}  {% if t %}x{% endif %}{% endif %}"},
      {"trailing newline dropped", "a\n"},
      {"two trailing newlines", "a\n\n"},
      {"crlf", "a\r\n  {% if t %}\r\nb\r\n  {% endif %}\r\nc"},
      {"raw block", "{% raw %}{{ not rendered }} {% if %}{% endraw %}!"},
      {"set with lstrip", "  {% set y = 3 %}\n  {{ y }}\n"},
      {"output keeps spaces", "  {{ n }}\n  {{ n }}"},
      {"tabs and spaces", "\t \t{% if t %}A{% endif %}\n"},
  }));
}

TEST(ChatOracleTest, LoopsAndScopes) {
  chat_test::ExpectMatchesOracle(Cases({
      {"loop vars", "{% for x in xs %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/{{ loop.revindex0 }}/"
                    "{{ loop.first }}/{{ loop.last }}/{{ loop.length }};{% endfor %}"},
      {"prev/next", "{% for x in xs %}{{ loop.previtem | default('-') }}>{{ x }}>{{ loop.nextitem | default('-') }} {% endfor %}"},
      {"for else", "{% for x in empty %}{{ x }}{% else %}none{% endfor %}|{% for x in xs %}{{ x }}{% else %}none{% endfor %}"},
      {"dict keys", "{% for k in d %}{{ k }},{% endfor %}"},
      {"dict items unpack", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}"},
      {"items filter unpack", "{% for k, v in d | items %}{{ k }}={{ v }};{% endfor %}"},
      {"paren unpack", "{% for (a, b) in [[1, 2], [3, 4]] %}{{ a + b }},{% endfor %}"},
      {"loop filter", "{% for x in xs if x != 1 %}{{ loop.index }}:{{ x }}/{{ loop.length }} {% endfor %}"},
      {"break continue", "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x > 5 %}{% break %}{% endif %}{{ x }}{% endfor %}"},
      {"nested loops", "{% for a in xs %}{% for b in xs %}{% if b == a %}{% break %}{% endif %}{{ a }}{{ b }} {% endfor %}|{% endfor %}"},
      {"set in loop does not leak", "{% set y = 0 %}{% for x in xs %}{% set y = y + x %}{{ y }},{% endfor %}{{ y }}"},
      {"namespace accumulates", "{% set ns = namespace(total=0, names=[]) %}{% for p in people %}{% set ns.total = ns.total + p.age %}"
                                "{% set ns.names = ns.names + [p.name] %}{% endfor %}{{ ns.total }} {{ ns.names }}"},
      {"set in if leaks", "{% if t %}{% set y = 5 %}{% endif %}{{ y }}"},
      {"block set", "{% set block %}\n  inner {{ n }}\n{% endset %}[{{ block }}]"},
      {"tuple set", "{% set a, b = 1, 'two' %}{{ a }}{{ b }}"},
      {"loop cycle", "{% for x in xs %}{{ loop.cycle('odd', 'even') }} {% endfor %}"},
      {"loop over string", "{% for c in 'héé' %}[{{ c }}]{% endfor %}"},
      {"reversed messages", "{% for m in messages[::-1] %}{{ m.role }}{{ (messages | length - 1) - loop.index0 }} {% endfor %}"},
      {"with block", "{% with a = 1, b = n %}{{ a + b }}{% endwith %}{{ a is defined }}"},
      {"outer var inside loop before set", "{% set y = 5 %}{% for i in [1, 2] %}[{{ y }}]{% set y = i %}{% endfor %}{{ y }}"},
  }));
}

TEST(ChatOracleTest, MacrosAndCallBlocks) {
  chat_test::ExpectMatchesOracle(Cases({
      {"macro defaults", "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('a') }} {{ greet('b', '?') }} {{ greet(punct='.', name='c') }}"},
      {"macro sees globals", "{% macro show() %}{{ n }}-{{ s }}{% endmacro %}{{ show() }}"},
      {"macro with loops", "{% macro render(items) %}{% for i in items %}<{{ i }}>{% endfor %}{% endmacro %}{{ render(xs) }}{{ render(words[:2]) }}"},
      {"call block", "{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}body {{ n }}{% endcall %}"},
      {"call block args", "{% macro each(xs) %}{% for x in xs %}{{ caller(x) }}{% endfor %}{% endmacro %}{% call(v) each(xs) %}[{{ v * 2 }}]{% endcall %}"},
      {"macro whitespace", "{% macro m(x) %}\n  {{ x }}\n{% endmacro %}\n{{ m(1) }}|{{ m(2) }}"},
  }));
}

TEST(ChatOracleTest, Expressions) {
  chat_test::ExpectMatchesOracle(Cases({
      {"arith ints", "{{ 7 + 3 }} {{ 7 - 10 }} {{ 7 * 3 }} {{ 7 / 2 }} {{ 8 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 2 ** -1 }}"},
      {"arith floats", "{{ 2.5 + 1 }} {{ 0.1 + 0.2 }} {{ 1e16 }} {{ 1.5e-5 }} {{ 123456789.0 * 1000 }} {{ 1 / 3 }} {{ -7.5 // 2 }} {{ 7.5 % -2 }} {{ 1e300 * 1e10 }}"},
      {"int64 edges", "{{ 7717 ** 4 }} {{ 2 ** 62 }} {{ -2 ** 63 }} {{ 9223372036854775807 - 1 }} {{ (-9223372036854775807 - 1) // 1 }} {{ 3037000499 * 3037000499 }} {{ (-2) ** 63 }} {{ 0 ** 0 }} {{ (-1) ** 1000000000000 }} {{ (-9223372036854775807 - 1) % -1 }}"},
      {"unary", "{{ -n }} {{ +n }} {{ -f }} {{ not t }} {{ not nul }} {{ - -3 }}"},
      {"precedence", "{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 2 ** 3 ** 2 }} {{ -2 ** 2 }} {{ 1 + 2 ~ 3 + 4 }} {{ n - 1 | abs }} {{ not 1 == 2 }}"},
      {"concat", "{{ 'a' ~ 1 ~ none ~ true ~ 2.0 ~ undefined_var }} {{ 'x' + 'y' }} {{ [1] + [2] }} {{ 'ab' * 3 }} {{ [0] * 2 }}"},
      {"comparisons", "{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 1 == 1.0 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ true == 1 }} {{ none == none }} {{ 'a' != 'a' }} {{ 2 >= 2 }} {{ 1 <= 0 }}"},
      {"in", "{{ 'ell' in s }} {{ 4 in xs }} {{ 3 in xs }} {{ 'a' in d }} {{ 'z' not in d }} {{ 'x' in empty }} {{ 'é' in 'café' }}"},
      {"and or values", "{{ 0 or 'x' }} {{ 1 and 'y' }} {{ '' and 1 }} {{ none or empty or 'z' }} {{ t and n }}"},
      {"conditional", "{{ 'yes' if t else 'no' }} {{ 'yes' if nul else 'no' }} [{{ 'a' if false }}] {{ 1 if false else 2 if false else 3 }}"},
      {"literals print", "{{ [1, 'a', none, true, 2.5, {'k': \"it's\"}] }} {{ (1, 2) }} {{ (1,) }} {{ () }} {{ {'a': [1], 'b': {}} }} {{ true }} {{ none }} {{ False }}"},
      {"string escapes", "{{ 'a\\nb\\t\\u00e9\\x41\\\\ \\'q\\'' }}{{ \"dq\\\"\" }}{{ 'adj' 'acent' }}"},
      {"repr quotes", "{{ [\"it's\", 'say \"x\"', 'both \\' \"', 'tab\\there', 'nl\\n'] }}"},
      // Runs of backslashes and quotes, control bytes, Latin-1 and wider code points; a repr of reprs.
      {"repr escapes", R"({{ ['a\\\\b\\', '\'\'\\\'', "\"\\\"'", '\x00\x1f\x7f\x80\xa0\xad\xa1\u00e9\u4e2d\r\t\nz', ([('x\\y',)],)] }} {{ [[('q\'"' ~ ['\\', "'"] | string) | string] | string] }})"},
      {"repr of reprs", R"({% set ns = namespace(s="'\\") %}{% for i in range(12) %}{% set ns.s = [ns.s, '"'] | string %}{% endfor %}{{ ns.s | length }} {{ ns.s[:40] }} {{ ns.s[-40:] }})"},
      {"subscripts", "{{ xs[0] }} {{ xs[-1] }} {{ xs[5] }}| {{ d['a'] }} {{ d.b }} {{ nested.k.v[1] }} {{ nested['k']['v'][-1] }} {{ s[0] }} {{ s[-1] }} {{ people[1].name }}"},
      {"slices", "{{ xs[::-1] }} {{ xs[1:] }} {{ xs[:2] }} {{ xs[::2] }} {{ xs[-2:] }} {{ xs[5:] }} {{ s[::-1] }} {{ s[2:5] }} {{ messages[3].content[:7] }} {{ messages[3].content[-5:] }} {{ xs[1:-1] }} {{ xs[::-2] }}"},
      {"missing prints empty", "[{{ missing }}][{{ d.missing }}][{{ d['missing'] }}][{{ nul.attr }}][{{ n.attr }}][{{ xs[10] }}]"},
      {"dict literal and methods", "{% set m = {'x': 1, 'y': 2} %}{{ m.get('x') }} {{ m.get('q') }} {{ m.get('q', 'dflt') }} {{ m.keys() | list }} {{ m.values() | list }} {{ m.items() | list }}"},
      {"range", "{{ range(3) | list }} {{ range(1, 7, 2) | list }} {{ range(5, 0, -2) | list }}"},
      {"dict global", "{{ dict(a=1, b='x') }} {{ dict(a=1)['a'] }}"},
      {"strftime year", "{{ strftime_now('%Y') | length }}"},
      {"attribute then call", "{{ s.lower().upper().split(',')[1].strip() }}"},
      {"is defined chains", "{{ d.a is defined }} {{ d.q is defined }} {{ d.q is undefined }} {{ missing is defined }} {{ nested.k.v is defined }}"},
  }));
}

TEST(ChatOracleTest, Tests) {
  chat_test::ExpectMatchesOracle(Cases({
      {"type tests", "{{ s is string }} {{ n is string }} {{ d is mapping }} {{ xs is mapping }} {{ xs is iterable }} {{ n is iterable }} "
                     "{{ s is sequence }} {{ d is sequence }} {{ missing is iterable }} {{ n is number }} {{ f is number }} {{ t is number }} "
                     "{{ n is integer }} {{ f is float }} {{ t is boolean }} {{ nul is none }} {{ n is none }} {{ range is callable }}"},
      {"value tests", "{{ t is true }} {{ 1 is true }} {{ false is false }} {{ 0 is false }} {{ n is odd }} {{ n is even }} {{ 9 is divisibleby 3 }} "
                      "{{ 9 is divisibleby(4) }} {{ n is equalto 7 }} {{ n is eq(8) }} {{ n is ne 8 }} {{ n is gt 3 }} {{ n is lt 3 }} {{ n is ge 7 }} {{ n is le 6 }}"},
      {"is not", "{{ n is not none }} {{ nul is not none }} {{ s is not string }} {{ missing is not defined }}"},
      {"in test", "{{ 3 is in xs }} {{ 'a' is in d }} {{ 'ell' is in s }}"},
      {"case tests", "{{ 'abc' is lower }} {{ 'aBc' is lower }} {{ 'ABC' is upper }}"},
      {"sameas", "{{ nul is sameas none }} {{ t is sameas true }} {{ 1 is sameas true }}"},
      {"test in condition", "{% if messages[0].role == 'system' and messages[0].content is string %}S{% endif %}{% if nul is none or x %}N{% endif %}"},
  }));
}

TEST(ChatOracleTest, Filters) {
  chat_test::ExpectMatchesOracle(Cases({
      {"tojson default", "{{ obj | tojson }}"},
      {"tojson indent", "{{ obj | tojson(indent=2) }}|{{ people | tojson(indent=4) }}|{{ [] | tojson(indent=2) }}|{{ {} | tojson(indent=2) }}"},
      {"tojson options", "{{ d | tojson(sort_keys=true) }} {{ d | tojson(separators=(',', ':')) }} {{ obj.y | tojson(ensure_ascii=true) }} {{ 'x' | tojson }} {{ 1.0 | tojson }} {{ none | tojson }}"},
      {"tojson string indent", "{{ nested | tojson(indent='\\t') }}"},
      {"tojson non-ascii", "{{ messages[3] | tojson }}"},
      {"string case", "{{ s | lower }} {{ s | upper }} {{ 'hello wORLD-foo(bar' | title }} {{ 'hELLO world' | capitalize }} {{ 'ünï' | upper }}"},
      {"trim", "[{{ '  x  ' | trim }}][{{ 'xxhixx' | trim('x') }}][{{ messages[2].content | trim }}]"},
      {"length count", "{{ xs | length }} {{ s | length }} {{ d | count }} {{ messages[3].content | length }} {{ missing | length }}"},
      {"default", "{{ missing | default('dflt') }} {{ n | d(5) }} {{ '' | default('e') }} {{ '' | default('e', true) }} {{ nul | default('x') }} {{ missing | default }}"},
      {"join", "{{ xs | join(', ') }} {{ words | join }} {{ people | join('/', attribute='name') }} {{ [1, none, 'a'] | join('-') }}"},
      {"first last", "{{ xs | first }} {{ xs | last }} {{ s | first }} {{ s | last }} [{{ empty | first }}]"},
      {"list string items", "{{ s[:3] | list }} {{ d | list }} {{ n | string }} {{ d | string }} {{ d | items | list }}"},
      {"int float", "{{ '42' | int }} {{ '4.7' | int }} {{ 'x' | int }} {{ 'x' | int(9) }} {{ 3.9 | int }} {{ '3.5' | float }} {{ n | float }} {{ 'z' | float }} {{ true | int }} {{ ' 12 ' | int }}"},
      {"replace", "{{ s | replace('l', 'L') }} {{ s | replace('l', 'L', 2) }} {{ s | replace('', '.') }}"},
      {"selectattr", "{{ people | selectattr('tags') | map(attribute='name') | list }} {{ people | selectattr('age', 'gt', 30) | map(attribute='name') | join(',') }} "
                     "{{ people | selectattr('tags', 'defined') | list | length }} {{ people | selectattr('name', 'equalto', 'bob') | first }}"},
      {"rejectattr", "{{ people | rejectattr('tags') | map(attribute='name') | list }} {{ messages | rejectattr('role', 'equalto', 'user') | map(attribute='role') | list }}"},
      {"select reject", "{{ xs | select('odd') | list }} {{ xs | reject('odd') | list }} {{ [0, 1, '', 'a', none] | select | list }} {{ xs | select('gt', 1) | list }}"},
      {"map", "{{ people | map(attribute='age') | sum }} {{ words | map('upper') | join }} {{ people | map(attribute='tags', default='-') | list }} {{ xs | map('string') | list }}"},
      {"dictsort", "{{ d | dictsort }} {{ d | dictsort(true) }} {{ d | dictsort(by='value', reverse=true) }}"},
      {"reverse unique", "{{ xs | reverse | list }} {{ s | reverse }} {{ words | unique | list }} {{ words | unique(case_sensitive=true) | list }}"},
      {"sort min max", "{{ xs | sort }} {{ words | sort }} {{ words | sort(case_sensitive=true) }} {{ people | sort(attribute='age', reverse=true) | map(attribute='name') | list }} {{ xs | min }} {{ words | max }}"},
      {"round abs sum", "{{ 2.5 | round }} {{ 3.5 | round }} {{ 2.345 | round(2) }} {{ 2.7 | round(method='floor') }} {{ 2.1 | round(0, 'ceil') }} {{ 3 | round }} {{ -4 | abs }} {{ -2.5 | abs }} {{ xs | sum }} {{ xs | sum(start=10) }}"},
      {"safe and escape", "{{ '<b>' | safe }} {{ '<a href=\"x\">&\\'' | e }}"},
      {"indent", "{{ 'a\\nb\\n\\nc' | indent }}|{{ 'a\\nb' | indent(2, true) }}|{{ 'a\\n\\nb' | indent('> ', blank=true) }}"},
      {"wordcount attr", "{{ 'a b  c' | wordcount }} {{ d | attr('a') }}"},
      {"filter block", "{% filter upper %}shout {{ n }}{% endfilter %}"},
  }));
}

TEST(ChatOracleTest, StringMethods) {
  chat_test::ExpectMatchesOracle(Cases({
      {"startswith endswith", "{{ s.startswith('Hell') }} {{ s.startswith(('x', 'He')) }} {{ s.endswith('World') }} {{ s.endswith('x') }}"},
      {"split", "{{ s.split(',') }} {{ '  a b\\t c\\n'.split() }} {{ 'a,b,c'.split(',', 1) }} {{ 'a,b,c'.rsplit(',', 1) }} {{ ' a  b '.split(' ') }} {{ ''.split() }} {{ 'a b c'.split(None, 1) }} {{ 'x</think>y</think>z'.split('</think>')[-1] }}"},
      {"strip family", "[{{ '\\n\\nx\\n'.strip('\\n') }}][{{ '  x  '.lstrip() }}][{{ '  x  '.rstrip() }}][{{ 'abcxcba'.strip('ab') }}][{{ '\\nq'.lstrip('\\n') }}]"},
      {"replace lower upper title", "{{ s.replace('o', '0') }} {{ s.replace('o', '0', 1) }} {{ s.lower() }} {{ s.upper() }} {{ 'hello wORLD-x'.title() }} {{ 'ab cD'.capitalize() }}"},
      {"find count", "{{ s.find('o') }} {{ s.rfind('o') }} {{ s.find('zz') }} {{ s.count('l') }} {{ 'éaé'.find('a') }}"},
      {"misc", "{{ 'a\\nb\\r\\nc'.splitlines() }} {{ '-'.join(words) }} {{ '42'.isdigit() }} {{ 'ab'.isalpha() }} {{ '  '.isspace() }} {{ 'abc'.islower() }} {{ 'x.py'.removesuffix('.py') }}"},
      {"qwen3 think split", "{% set c = '<think>\\nreason here\\n</think>\\n\\nanswer' %}{{ c.split('</think>')[-1].lstrip('\\n') }}|{{ c.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') }}"},
  }));
}

TEST(ChatOracleTest, FailuresMatch) {
  // Each of these fails in jinja2; we must fail too (messages differ, that is fine).
  chat_test::ExpectMatchesOracle(Cases({
      {"attribute of undefined", "{{ missing.attr }}"},
      {"attribute chain through missing key", "{{ d.q.r }}"},
      {"add str int", "{{ 1 + 'a' }}"},
      {"undefined arithmetic", "{{ missing + 1 }}"},
      {"raise_exception", "{% if t %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}"},
      {"call undefined", "{{ missing() }}"},
      {"iterate int", "{% for x in n %}{% endfor %}"},
      {"tojson undefined", "{{ missing | tojson }}"},
      {"less undefined", "{{ missing < 1 }}"},
      {"set attr on non-namespace", "{% set d.x = 1 %}"},
      // Found by tests/fuzz/chat_template_fuzz: a macro calling itself overflowed the rendering
      // thread's stack; jinja2 stops at Python's recursion limit, we at kMaxTemplateCallDepth.
      {"macro calling itself", "{% macro f(a, b='d') -%}{{ f(0) }}{%- endmacro %}{{ f(1) }}"},
  }));
}

TEST(ChatOracleTest, RecursiveMacrosWithinTheLimit) {
  chat_test::ExpectMatchesOracle(Cases({
      {"macro recursing 100 deep", "{% macro f(n) %}{% if n > 0 %}{{ n }},{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(100) }}"},
  }));
}

// Idioms of Mistral- and Qwen2.5-style templates (written for this test): role alternation
// checks, loop_messages slicing, content given as a list of typed parts.
const char* kIdioms = R"({%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content'] %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set loop_messages = messages %}
{%- endif %}
{{- bos_token }}
{%- for message in loop_messages %}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}
        {{- raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}
    {%- endif %}
    {%- if message['content'] is string %}
        {%- set content = message['content'] %}
    {%- else %}
        {%- set content = message['content'] | selectattr('type', 'equalto', 'text') | map(attribute='text') | join('\n') %}
    {%- endif %}
    {%- if message['role'] == 'user' %}
        {%- if loop.last and system_message is defined %}
            {{- '[INST] ' + system_message + '\n\n' + content + '[/INST]' }}
        {%- else %}
            {{- '[INST] ' + content + '[/INST]' }}
        {%- endif %}
    {%- elif message['role'] == 'assistant' %}
        {{- ' ' + content | trim + eos_token }}
    {%- endif %}
{%- endfor %}
{#- trailing comment #}
)";

TEST(ChatOracleTest, MistralStyleIdioms) {
  auto ctx = [](const char* messages) {
    ojson c = ojson::object();
    c["messages"] = ojson::parse(messages);
    c["bos_token"] = "<s>";
    c["eos_token"] = "</s>";
    c["add_generation_prompt"] = true;
    return c;
  };
  chat_test::ExpectMatchesOracle({
      {"plain", kIdioms, ctx(R"([{"role":"user","content":"Hi"},{"role":"assistant","content":" Hello \n"},{"role":"user","content":"Bye"}])")},
      {"system", kIdioms, ctx(R"([{"role":"system","content":"Sys"},{"role":"user","content":"Hi"}])")},
      {"parts", kIdioms, ctx(R"([{"role":"user","content":[{"type":"text","text":"a"},{"type":"image"},{"type":"text","text":"b"}]}])")},
      {"not alternating", kIdioms, ctx(R"([{"role":"user","content":"a"},{"role":"user","content":"b"}])")},
  });
}

// A Llama-3-style template written for this test (not copied from a model): system message
// extraction, bos_token, a date default, tools in the first user turn, tool calls and ipython
// results.
const char* kLlamaStyle = R"({{- bos_token }}
{%- if not date_string is defined %}
    {%- set date_string = "01 Jan 2025" %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content'] | trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}
{{- "<|start_header_id|>system<|end_header_id|>\n\n" }}
{{- "Today Date: " + date_string + "\n\n" }}
{%- if tools is not none %}
    {{- "You can call these functions:\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
{%- endif %}
{{- system_message }}
{{- "<|eot_id|>" }}
{%- for message in messages %}
    {%- if message.role not in ['user', 'assistant', 'tool', 'ipython'] %}
        {{- raise_exception("bad role " ~ message.role) }}
    {%- endif %}
    {%- if message.role == 'tool' or message.role == 'ipython' %}
        {{- "<|start_header_id|>ipython<|end_header_id|>\n\n" }}
        {%- if message.content is mapping or message.content is iterable and message.content is not string %}
            {{- message.content | tojson }}
        {%- else %}
            {{- message.content }}
        {%- endif %}
        {{- "<|eot_id|>" }}
    {%- elif message.tool_calls is defined and message.tool_calls %}
        {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
        {%- for call in message.tool_calls %}
            {%- set f = call.function if call.function is defined else call %}
            {{- '{"name": "' + f.name + '", "parameters": ' + f.arguments | tojson + '}' }}
            {%- if not loop.last %}{{ "; " }}{% endif %}
        {%- endfor %}
        {{- "<|eot_id|>" }}
    {%- else %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}
)";

TEST(ChatOracleTest, LlamaStyleTemplate) {
  auto ctx = [](const char* messages, bool agp, const char* extra) {
    ojson c = ojson::parse(extra);
    c["messages"] = ojson::parse(messages);
    c["bos_token"] = "<|begin_of_text|>";
    c["eos_token"] = "<|eot_id|>";
    c["add_generation_prompt"] = agp;
    return c;
  };
  const char* tools = R"({"tools": [{"type": "function", "function": {"name": "calc", "parameters": {"type": "object",
      "properties": {"expr": {"type": "string"}}}}}], "date_string": "26 Jul 2024"})";
  std::vector<OracleCase> cases = {
      {"no system", kLlamaStyle, ctx(R"([{"role":"user","content":"  Hi  "}])", true, "{}")},
      {"system", kLlamaStyle, ctx(R"([{"role":"system","content":"Be nice.\n"},{"role":"user","content":"Hi"},
          {"role":"assistant","content":"Hello!"}])", false, "{}")},
      {"tools and calls", kLlamaStyle, ctx(R"([{"role":"system","content":"S"},{"role":"user","content":"2+2?"},
          {"role":"assistant","tool_calls":[{"function":{"name":"calc","arguments":{"expr":"2+2"}}},{"name":"calc","arguments":{"expr":"1"}}]},
          {"role":"tool","content":{"result":4}},{"role":"ipython","content":"plain"}])", true, tools)},
      {"bad role raises", kLlamaStyle, ctx(R"([{"role":"robot","content":"x"}])", true, "{}")},
  };
  chat_test::ExpectMatchesOracle(cases);
}

}  // namespace
}  // namespace tandem
