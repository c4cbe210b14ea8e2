// Private to the chat template renderer: splits a template into tokens the way jinja2's lexer does
// with trim_blocks=True, lstrip_blocks=True and keep_trailing_newline=False.
#pragma once

#include <string>
#include <vector>

namespace tandem::chat {

struct Token {
  enum class Type { kText, kVarBegin, kVarEnd, kBlockBegin, kBlockEnd, kName, kString, kInt, kFloat, kOp, kEof };
  Type type;
  std::string text;  // kText: the output text; kName/kOp: the name or operator; kString: the value
  int line;
  long long int_value = 0;
  double float_value = 0;
};

// Throws TemplateError("... at line N") for an unterminated tag, comment or string, or a character
// that starts no token.
std::vector<Token> Lex(const std::string& source);

}  // namespace tandem::chat
