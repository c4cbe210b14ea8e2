// grammar_bench: the grammar engine's costs on the bundled model's Qwen3 vocabulary (151,669 ids):
// compile time per grammar, and the time to fill one token mask (p50, p99 over the steps of
// random generations), cached (TokenMasker::Fill) beside one uncached vocabulary walk.
//
//   build/bench/grammar_bench [--generations N] [--steps N] [--schemas tests/grammar/schemas.json]
//
// Prints one table row per grammar, then the tests' schema suite: per schema the compile time and
// TokenMasker::Precompute's (every node's cache, what the engine's MaskPrecomputer computes in
// the background), and mask times over 2 random generations of each, cold (first visits inside
// Fill), warm (after the precompute) and racing (a MaskPrecomputer thread started with the
// generation, as in the engine with no prefill between). Wall clock.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "grammar/automaton.h"
#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "grammar/mask_precompute.h"
#include "grammar/matcher.h"
#include "grammar/regex.h"
#include "grammar/token_mask.h"
#include "tokenizer/tokenizer.h"

#include <nlohmann/json.hpp>

namespace {

using tandem::grammar::Automaton;
using tandem::grammar::Matcher;
using tandem::grammar::TokenMasker;
using tandem::grammar::TokenVocab;
using Clock = std::chrono::steady_clock;

struct Case {
  const char* name;
  const char* gbnf;
};

const Case kCases[] = {
    {"json", nullptr},  // tests/grammar/json.gbnf
    {"person", R"(
root ::= "{" ws "\"name\"" ws ":" ws str ws "," ws "\"age\"" ws ":" ws int ws "," ws "\"tags\"" ws ":" ws "[" ws ( str ( ws "," ws str ){0,4} )? ws "]" ws "}"
str  ::= "\"" [^"\\\x00-\x1F]{0,40} "\""
int  ::= "0" | [1-9] [0-9]{0,2}
ws   ::= [ \n]{0,1}
)"},
    {"date_list", R"(
root ::= "[" date ( ", " date ){0,9} "]"
date ::= [0-9]{4} "-" ( "0" [1-9] | "1" [0-2] ) "-" ( [0-2] [0-9] | "3" [01] )
)"},
};

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

}  // namespace

int main(int argc, char** argv) {
  int generations = 5, steps = 64;
  std::string schemas_path = TANDEM_SOURCE_DIR "/tests/grammar/schemas.json";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--generations")) generations = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--steps")) steps = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--schemas")) schemas_path = argv[i + 1];
  }
  auto tok = tandem::Tokenizer::Load(TANDEM_DEFAULT_MODEL_DIR);
  if (!tok.ok()) {
    std::fprintf(stderr, "grammar_bench: %s\n", tok.status().ToString().c_str());
    return 1;
  }
  auto t0 = Clock::now();
  auto vocab = TokenVocab::FromTokenizer(**tok, tandem::EndOfGenerationTokenIds(**tok));
  const double vocab_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  std::printf("vocabulary: %d ids (%zu ordinary: %zu byte-trie nodes, longest %zu bytes), sorted in "
              "%.1f ms\n\n", vocab->size(), vocab->sorted().size(), vocab->trie_nodes(), vocab->longest(),
              vocab_ms);
  std::printf("| grammar | compile ms | nodes | mask p50 us | mask p99 us | first-visit max ms | uncached p50 us | steps |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  for (const Case& c : kCases) {
    auto c0 = Clock::now();
    std::string text = c.gbnf ? c.gbnf : "";
    if (!c.gbnf) {  // the tests' JSON grammar
      std::ifstream f(TANDEM_SOURCE_DIR "/tests/grammar/json.gbnf");
      text.assign(std::istreambuf_iterator<char>(f), {});
    }
    auto g = tandem::grammar::ParseGbnf(text);
    if (!g.ok()) return std::fprintf(stderr, "%s: %s\n", c.name, g.status().ToString().c_str()), 1;
    auto a = Automaton::Compile(*g);
    if (!a.ok()) return std::fprintf(stderr, "%s: %s\n", c.name, a.status().ToString().c_str()), 1;
    const double compile_ms = std::chrono::duration<double, std::milli>(Clock::now() - c0).count();
    auto automaton = std::make_shared<const Automaton>(std::move(*a));
    TokenMasker masker(vocab, automaton);
    std::vector<uint32_t> mask(vocab->mask_words());
    std::vector<double> cached, uncached;
    double first_max = 0;
    std::mt19937 rng(1);
    for (int gen = 0; gen < generations; ++gen) {
      Matcher m(automaton);
      for (int s = 0; s < steps; ++s) {
        const size_t before = masker.cached_nodes();
        auto f0 = Clock::now();
        masker.Fill(m, mask.data());
        const double us = std::chrono::duration<double, std::micro>(Clock::now() - f0).count();
        if (masker.cached_nodes() != before) first_max = std::max(first_max, us / 1000);
        cached.push_back(us);
        if (s % 8 == 0) {
          std::vector<uint32_t> ref(vocab->mask_words());
          auto u0 = Clock::now();
          masker.FillUncached(m, ref.data());
          uncached.push_back(std::chrono::duration<double, std::micro>(Clock::now() - u0).count());
        }
        std::vector<int32_t> allowed;
        for (int32_t id = 0; id < vocab->size(); ++id) {
          if (mask[id / 32] >> (id % 32) & 1) allowed.push_back(id);
        }
        if (allowed.empty()) break;
        const int32_t next = allowed[rng() % allowed.size()];
        if (vocab->bytes(next).empty() || !m.Accept(vocab->bytes(next))) break;  // a stop token
      }
    }
    std::printf("| %s | %.2f | %zu | %.1f | %.1f | %.1f | %.1f | %zu |\n", c.name, compile_ms,
                automaton->num_nodes(), Percentile(cached, 0.5), Percentile(cached, 0.99), first_max,
                Percentile(uncached, 0.5), cached.size());
  }
  // The schema suite of the tests: compile time per schema, and mask times over all its steps.
  std::ifstream in(schemas_path);
  if (!in) {
    std::fprintf(stderr, "grammar_bench: cannot read %s\n", schemas_path.c_str());
    return 1;
  }
  const auto suite = nlohmann::ordered_json::parse(in);
  // Per schema: compile (JSON Schema -> grammar -> automaton), then TokenMasker::Precompute (every
  // node's cache: what MaskPrecomputer does in the background). Mask times over the same random
  // generations twice: cold (a fresh masker, first visits inside Fill) and warm (the precomputed
  // one: the steady state once the background pass is done).
  std::vector<double> compile_ms, precompute_ms, total_ms, cold_us, warm_us, racing_us;
  size_t first_visits = 0, cache_bytes_max = 0;
  std::string slowest;
  double slowest_ms = 0;
  for (const auto& c : suite) {
    auto c0 = Clock::now();
    auto g = tandem::grammar::JsonSchemaToGrammar(c["schema"].dump());
    if (!g.ok()) return std::fprintf(stderr, "%s\n", g.status().ToString().c_str()), 1;
    auto a = Automaton::Compile(*g);
    if (!a.ok()) return std::fprintf(stderr, "%s\n", a.status().ToString().c_str()), 1;
    compile_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - c0).count());
    auto automaton = std::make_shared<const Automaton>(std::move(*a));
    TokenMasker warm(vocab, automaton);
    auto p0 = Clock::now();
    warm.Precompute();
    precompute_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - p0).count());
    total_ms.push_back(compile_ms.back() + precompute_ms.back());
    if (total_ms.back() > slowest_ms) slowest_ms = total_ms.back(), slowest = c["name"];
    cache_bytes_max = std::max(cache_bytes_max, warm.cached_bytes());
    TokenMasker cold(vocab, automaton);
    auto racing = std::make_shared<TokenMasker>(vocab, automaton);
    for (int pass = 0; pass < 3; ++pass) {
      TokenMasker& masker = pass == 0 ? cold : pass == 1 ? warm : *racing;
      std::vector<double>& times = pass == 0 ? cold_us : pass == 1 ? warm_us : racing_us;
      // Pass 2: the engine's case with no prefill in between, the background pass started as the
      // generation starts.
      tandem::grammar::MaskPrecomputer background;
      if (pass == 2) background.Add(racing);
      std::vector<uint32_t> mask(vocab->mask_words());
      std::mt19937 rng(7);
      for (int gen = 0; gen < 2; ++gen) {
        Matcher m(automaton);
        for (int s = 0; s < steps; ++s) {
          const size_t before = masker.cached_nodes();
          auto f0 = Clock::now();
          masker.Fill(m, mask.data());
          times.push_back(std::chrono::duration<double, std::micro>(Clock::now() - f0).count());
          if (pass == 0) first_visits += masker.cached_nodes() != before;
          std::vector<int32_t> allowed;
          for (int32_t id = 0; id < vocab->size(); ++id) {
            if (mask[id / 32] >> (id % 32) & 1) allowed.push_back(id);
          }
          if (allowed.empty()) break;
          const int32_t next = allowed[rng() % allowed.size()];
          if (vocab->bytes(next).empty() || !m.Accept(vocab->bytes(next))) break;
        }
      }
    }
  }
  std::printf("\nschema suite (%s): %zu schemas\n\n", schemas_path.c_str(), suite.size());
  std::printf("| | p50 | p95 | p99 | max |\n|---|---|---|---|---|\n");
  auto row = [](const char* what, const std::vector<double>& v) {
    std::printf("| %s | %.2f | %.2f | %.2f | %.2f |\n", what, Percentile(v, 0.5), Percentile(v, 0.95),
                Percentile(v, 0.99), Percentile(v, 1.0));
  };
  row("compile ms", compile_ms);
  row("precompute ms", precompute_ms);
  row("compile + precompute ms", total_ms);
  row("mask us, cold (first visits inside Fill)", cold_us);
  row("mask us, warm (after precompute)", warm_us);
  row("mask us, racing the background precompute", racing_us);
  std::printf("\nsteps: %zu (cold: %zu with a first visit); slowest compile + precompute: %s %.1f ms; "
              "largest cache %.1f MiB\n", cold_us.size(), first_visits, slowest.c_str(), slowest_ms,
              static_cast<double>(cache_bytes_max) / (1 << 20));
  // Hostile specs (docs/robustness.md): Compile refuses them from its counts, before building.
  std::printf("\n| hostile regex | refused in us (best of 5) | error |\n|---|---|---|\n");
  for (const char* re : {"(.{992}){83}", "((((.{1000}){1000}){1000}){1000}){1000}",
                         "([acegikmoqsuwyACEGIKMOQSUWY02468]{6000}){30}"}) {
    auto g = tandem::grammar::RegexToGrammar(re);
    if (!g.ok()) return std::fprintf(stderr, "%s: %s\n", re, g.status().ToString().c_str()), 1;
    double best_us = 1e18;
    std::string error = "compiled";
    for (int i = 0; i < 5; ++i) {
      auto r0 = Clock::now();
      auto a = Automaton::Compile(*g);
      best_us = std::min(best_us, std::chrono::duration<double, std::micro>(Clock::now() - r0).count());
      if (!a.ok()) error = a.status().message();
    }
    std::printf("| `%s` | %.1f | %s |\n", re, best_us, error.c_str());
  }
  // Many rules within the 1 MB spec limit (docs/robustness.md): rule lookup by name, the
  // recursion check, the nullable / left-recursion analysis and the fewest-bytes-to-end relaxation
  // were quadratic or worse in them.
  std::printf("\n| hostile GBNF, n rules | KB | parse ms | compile ms (best of 3) | result |\n|---|---|---|---|---|\n");
  const int n = 40000;
  const char* kinds[] = {"r_i ::= \"a\" (r_i+1)?", "r_i ::= r_i+1 \"a\" | \"b\"",
                         "r_i ::= r_i+1 r_i+1; last \"\" | \"a\" r0",
                         "r_i ::= \"a\" r_i+1 | \"c\" r_i-1; r0 ::= \"b\""};
  for (int k = 0; k < 4; ++k) {
    const char* kind = kinds[k];
    std::string text = k == 3 ? "root ::= r1\n" : "root ::= r0\n";
    for (int i = 0; i < n; ++i) {
      const std::string me = "r" + std::to_string(i), next = "r" + std::to_string((i + 1) % n);
      if (k == 0) text += me + " ::= \"a\" (" + next + ")?\n";
      else if (k == 1) text += me + " ::= " + next + " \"a\" | \"b\"\n";
      else if (k == 2) text += me + " ::= " + (i + 1 < n ? next + " " + next : std::string("\"\" | \"a\" r0")) + "\n";
      else if (i == 0) text += "r0 ::= \"b\"\n";  // the root calls r1: each rule's end is found through the one before
      else text += me + " ::= " + (i + 1 < n ? "\"a\" " + next + " | " : std::string()) + "\"c\" r" + std::to_string(i - 1) + "\n";
    }
    double parse_ms = 1e18, compile_ms = 1e18;
    std::string result = "compiled";
    for (int i = 0; i < 3; ++i) {
      auto t0 = Clock::now();
      auto g = tandem::grammar::ParseGbnf(text);
      auto t1 = Clock::now();
      if (!g.ok()) return std::fprintf(stderr, "%s: %s\n", kind, g.status().ToString().c_str()), 1;
      auto a = Automaton::Compile(*g);
      parse_ms = std::min(parse_ms, std::chrono::duration<double, std::milli>(t1 - t0).count());
      compile_ms = std::min(compile_ms, std::chrono::duration<double, std::milli>(Clock::now() - t1).count());
      if (!a.ok()) result = a.status().message();
    }
    std::string cell;  // a '|' would end the markdown cell
    for (const char* c = kind; *c; ++c) cell += *c == '|' ? std::string("\\|") : std::string(1, *c);
    std::printf("| `%s`, %d | %zu | %.1f | %.1f | %s |\n", cell.c_str(), n, text.size() / 1024, parse_ms,
                compile_ms, result.c_str());
  }
  return 0;
}
