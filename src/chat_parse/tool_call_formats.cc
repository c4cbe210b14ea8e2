// The call formats of tool_calls.h: one call region's text to calls.
#include <cstdlib>

#include "chat_parse/tool_calls.h"
#include "common/json_limits.h"

namespace tandem::chat_parse {

using ojson = nlohmann::ordered_json;

// Arrays and objects in a call's JSON at most (as in a request body, frontend/openai_request.h).
constexpr int kMaxArgumentsNesting = 512;

namespace {

bool IsSpace(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

std::string_view Trim(std::string_view s) {
  while (!s.empty() && IsSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsSpace(s.back())) s.remove_suffix(1);
  return s;
}

size_t SkipSpace(std::string_view s, size_t i) {
  while (i < s.size() && IsSpace(s[i])) ++i;
  return i;
}

std::optional<ojson> ParseJson(std::string_view text) {
  // Bounded (common/json_limits.h): a model's output may hold any number of keys, and nesting
  // without end (dumping a value recurses: 100 k nested arrays overflowed the stack). Past the
  // bounds it is not a call: the text stays content.
  BoundedJson parsed = ParseBoundedJson(text, kMaxArgumentsNesting);
  if (parsed.error != JsonParseError::kNone) return std::nullopt;
  return std::move(parsed.value);
}

// Arguments as JSON text: an object (or any value) is written compactly; a string holding JSON is
// taken as that JSON (some models write arguments as a string); absent is "{}".
std::optional<std::string> ArgumentsText(const ojson* args) {
  if (!args || args->is_null()) return std::string("{}");
  if (args->is_string()) {
    std::optional<ojson> inner = ParseJson(args->get_ref<const std::string&>());
    if (!inner) return std::nullopt;
    return CompactJson(*inner);
  }
  return CompactJson(*args);
}

// {"name": "f", "arguments" | "parameters": {...}} to a call.
std::optional<ToolCall> CallFromObject(const ojson& obj) {
  if (!obj.is_object()) return std::nullopt;
  auto name = obj.find("name");
  if (name == obj.end() || !name->is_string() || name->get_ref<const std::string&>().empty())
    return std::nullopt;
  const ojson* args = nullptr;
  for (const char* key : {"arguments", "parameters"}) {
    if (auto it = obj.find(key); it != obj.end()) {
      args = &*it;
      break;
    }
  }
  std::optional<std::string> text = ArgumentsText(args);
  if (!text) return std::nullopt;
  return ToolCall{name->get<std::string>(), *text};
}

std::optional<std::vector<ToolCall>> Hermes(std::string_view region) {
  std::optional<ojson> j = ParseJson(Trim(region));
  if (!j) return std::nullopt;
  std::optional<ToolCall> call = CallFromObject(*j);
  if (!call) return std::nullopt;
  return std::vector<ToolCall>{std::move(*call)};
}

// The JSON Schema type a tool gives parameter `param` of function `name` ("" when unknown).
std::string ParamType(const ojson* tools, const std::string& name, const std::string& param) {
  if (!tools || !tools->is_array()) return "";
  for (const ojson& t : *tools) {
    auto f = t.find("function");
    if (f == t.end() || !f->is_object()) continue;
    auto n = f->find("name");
    if (n == f->end() || !n->is_string() || n->get_ref<const std::string&>() != name) continue;
    auto params = f->find("parameters");
    if (params == f->end() || !params->is_object()) return "";
    auto props = params->find("properties");
    if (props == params->end() || !props->is_object()) return "";
    auto p = props->find(param);
    if (p == props->end() || !p->is_object()) return "";
    auto type = p->find("type");
    if (type != p->end() && type->is_string()) return type->get<std::string>();
    return "";
  }
  return "";
}

// <function=f>\n<parameter=p>\nvalue\n</parameter>...</function>, one or more.
std::optional<std::vector<ToolCall>> Qwen3Coder(std::string_view region, const ojson* tools) {
  constexpr std::string_view kFn = "<function=", kFnEnd = "</function>", kParam = "<parameter=",
                             kParamEnd = "</parameter>";
  std::vector<ToolCall> calls;
  size_t pos = SkipSpace(region, 0);
  while (pos < region.size()) {
    if (region.substr(pos, kFn.size()) != kFn) return std::nullopt;
    size_t gt = region.find('>', pos + kFn.size());
    if (gt == std::string_view::npos) return std::nullopt;
    std::string name(Trim(region.substr(pos + kFn.size(), gt - pos - kFn.size())));
    if (name.empty()) return std::nullopt;
    // The parameters in order, each value up to its </parameter> (so a value may hold
    // "</function>" or "</tool_call>", as the grammar of an enforced call allows), then the
    // function's end; a value without its end tag runs to the next <parameter= or </function>.
    ojson args = ojson::object();
    size_t p = SkipSpace(region, gt + 1);
    size_t end = std::string_view::npos;  // where </function> starts
    while (p < region.size()) {
      if (region.substr(p, kFnEnd.size()) == kFnEnd) {
        end = p;
        break;
      }
      if (region.substr(p, kParam.size()) != kParam) return std::nullopt;
      size_t pgt = region.find('>', p + kParam.size());
      if (pgt == std::string_view::npos) return std::nullopt;
      std::string param(Trim(region.substr(p + kParam.size(), pgt - p - kParam.size())));
      if (param.empty()) return std::nullopt;
      size_t vend = region.find(kParamEnd, pgt);
      size_t next = vend == std::string_view::npos ? std::min(region.find(kParam, pgt), region.find(kFnEnd, pgt))
                                                   : vend + kParamEnd.size();
      if (vend == std::string_view::npos) vend = next == std::string_view::npos ? region.size() : next;
      std::string_view value = region.substr(pgt + 1, vend - pgt - 1);
      if (!value.empty() && value.front() == '\n') value.remove_prefix(1);
      if (!value.empty() && value.back() == '\n') value.remove_suffix(1);
      const std::string type = ParamType(tools, name, param);
      std::optional<ojson> parsed;
      if (type != "string") parsed = ParseJson(value);
      if (parsed && type == "integer" && !parsed->is_number_integer()) parsed.reset();
      if (parsed && type == "number" && !parsed->is_number()) parsed.reset();
      if (parsed && type == "boolean" && !parsed->is_boolean()) parsed.reset();
      if (!parsed && type == "boolean" && (value == "True" || value == "False"))
        parsed = ojson(value == "True");
      args[param] = parsed ? std::move(*parsed) : ojson(std::string(value));
      p = next == std::string_view::npos ? region.size() : SkipSpace(region, next);
    }
    calls.push_back({std::move(name), CompactJson(args)});
    pos = end == std::string_view::npos ? region.size() : SkipSpace(region, end + kFnEnd.size());
  }
  if (calls.empty()) return std::nullopt;
  return calls;
}

// JSON objects separated by ";" (Llama 3.1's several calls), nothing else.
std::optional<std::vector<ToolCall>> JsonObjects(std::string_view region) {
  std::vector<ToolCall> calls;
  size_t pos = SkipSpace(region, 0);
  while (pos < region.size()) {
    if (region[pos] != '{') return std::nullopt;
    size_t end = JsonContainerEnd(region, pos);
    if (end == std::string_view::npos) return std::nullopt;
    std::optional<ojson> j = ParseJson(region.substr(pos, end - pos));
    if (!j) return std::nullopt;
    std::optional<ToolCall> call = CallFromObject(*j);
    if (!call) return std::nullopt;
    calls.push_back(std::move(*call));
    pos = SkipSpace(region, end);
    if (pos < region.size() && region[pos] == ';') pos = SkipSpace(region, pos + 1);
  }
  if (calls.empty()) return std::nullopt;
  return calls;
}

// [{"name", "arguments"}, ...] (v3), or f[ARGS]{...} / f{...} repeated with [TOOL_CALLS] (v11).
std::optional<std::vector<ToolCall>> Mistral(std::string_view region) {
  constexpr std::string_view kMarker = "[TOOL_CALLS]", kArgs = "[ARGS]";
  std::vector<ToolCall> calls;
  size_t pos = SkipSpace(region, 0);
  while (pos < region.size()) {
    if (region[pos] == '[' && region.substr(pos, kMarker.size()) != kMarker) {
      size_t end = JsonContainerEnd(region, pos);
      if (end == std::string_view::npos) return std::nullopt;
      std::optional<ojson> j = ParseJson(region.substr(pos, end - pos));
      if (!j || !j->is_array() || j->empty()) return std::nullopt;
      for (const ojson& item : *j) {
        std::optional<ToolCall> call = CallFromObject(item);
        if (!call) return std::nullopt;
        calls.push_back(std::move(*call));
      }
      pos = SkipSpace(region, end);
    } else {
      size_t brace = region.find('{', pos);
      if (brace == std::string_view::npos) return std::nullopt;
      std::string_view name = region.substr(pos, brace - pos);
      if (name.size() >= kArgs.size() && name.substr(name.size() - kArgs.size()) == kArgs)
        name.remove_suffix(kArgs.size());
      name = Trim(name);
      if (name.empty() || name.find_first_of("{}[]\"") != std::string_view::npos) return std::nullopt;
      size_t end = JsonContainerEnd(region, brace);
      if (end == std::string_view::npos) return std::nullopt;
      std::optional<ojson> args = ParseJson(region.substr(brace, end - brace));
      if (!args) return std::nullopt;
      calls.push_back({std::string(name), CompactJson(*args)});
      pos = SkipSpace(region, end);
    }
    if (region.substr(pos, kMarker.size()) == kMarker) pos = SkipSpace(region, pos + kMarker.size());
  }
  if (calls.empty()) return std::nullopt;
  return calls;
}

}  // namespace

std::string CompactJson(const ojson& j) {
  return j.dump(-1, ' ', false, ojson::error_handler_t::replace);
}

size_t JsonContainerEnd(std::string_view s, size_t pos) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = pos; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    else if (c == '{' || c == '[') ++depth;
    else if (c == '}' || c == ']') {
      if (--depth == 0) return i + 1;
      if (depth < 0) return std::string_view::npos;
    }
  }
  return std::string_view::npos;
}

std::optional<std::vector<ToolCall>> ParseRegion(ToolCallFormat format, std::string_view region,
                                                 const ojson* tools) {
  switch (format) {
    case ToolCallFormat::kHermes: return Hermes(region);
    case ToolCallFormat::kQwen3Coder: return Qwen3Coder(region, tools);
    case ToolCallFormat::kLlama3Json: return JsonObjects(region);
    case ToolCallFormat::kMistral: return Mistral(region);
    case ToolCallFormat::kPythonic: {
      std::string_view r = Trim(region);
      constexpr std::string_view kEnd = "<|python_end|>";
      if (r.size() >= kEnd.size() && r.substr(r.size() - kEnd.size()) == kEnd)
        r.remove_suffix(kEnd.size());
      return ParsePythonicCalls(r);
    }
    case ToolCallFormat::kNone: break;
  }
  return std::nullopt;
}

}  // namespace tandem::chat_parse
