#include "chat_test_util.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "chat/template.h"
#include "common/file_util.h"

namespace tandem::chat_test {

std::string Qwen3Template() {
  auto config = ReadJsonFile(DefaultModelDir() + "/tokenizer_config.json");
  EXPECT_TRUE(config.ok()) << config.status().ToString();
  if (!config.ok()) return {};
  return (*config)["chat_template"].get<std::string>();
}

std::vector<OracleResult> RenderWithJinja2(const std::vector<OracleCase>& cases) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("tandem_chat_oracle_" + std::to_string(::getpid()) + "_" +
                                              std::to_string(std::rand()));
  fs::create_directories(dir);
  const fs::path in = dir / "cases.json", out = dir / "out.json", log = dir / "log.txt";
  ojson all = ojson::array();
  for (const auto& c : cases) all.push_back({{"template", c.source}, {"context", c.context}});
  {
    std::ofstream f(in, std::ios::binary);
    f << all.dump();
  }
  const std::string script = std::string(TANDEM_TESTS_DIR) + "/tools/render_jinja.py";
  const std::string cmd = "/usr/bin/python3 '" + script + "' '" + in.string() + "' '" + out.string() + "' > '" +
                          log.string() + "' 2>&1";
  int rc = std::system(cmd.c_str());
  std::vector<OracleResult> results;
  if (rc != 0) {
    std::ifstream lf(log);
    std::stringstream ss;
    ss << lf.rdbuf();
    ADD_FAILURE() << "oracle failed (rc " << rc << "): " << cmd << "\n" << ss.str();
  } else {
    std::ifstream f(out, std::ios::binary);
    ojson j = ojson::parse(f);
    for (const auto& r : j) {
      OracleResult o;
      o.ok = r["ok"].get<bool>();
      o.output = o.ok ? r["output"].get<std::string>() : r["error"].get<std::string>();
      results.push_back(std::move(o));
    }
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
  return results;
}

void ExpectMatchesOracle(const std::vector<OracleCase>& cases) {
  std::vector<OracleResult> expected = RenderWithJinja2(cases);
  if (expected.size() != cases.size()) {
    ADD_FAILURE() << "oracle returned " << expected.size() << " results for " << cases.size() << " cases";
    return;
  }
  for (size_t k = 0; k < cases.size(); ++k) {
    SCOPED_TRACE("case '" + cases[k].name + "'");
    auto tmpl = ChatTemplate::Parse(cases[k].source);
    Result<std::string> got = tmpl.ok() ? tmpl->Render(cases[k].context) : Result<std::string>(tmpl.status());
    if (expected[k].ok) {
      ASSERT_TRUE(got.ok()) << got.status().ToString() << "\njinja2 rendered: " << expected[k].output;
      EXPECT_EQ(*got, expected[k].output);
    } else {
      EXPECT_FALSE(got.ok()) << "jinja2 failed (" << expected[k].output << ") but we rendered: " << *got;
    }
  }
}

}  // namespace tandem::chat_test
