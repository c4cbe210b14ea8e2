// GPT-2 byte-level alphabet (huggingface/tokenizers pre_tokenizers::byte_level::bytes_char): every
// byte maps to one printable code point; vocab strings of byte-level BPE are written in it.
#pragma once

#include <string>
#include <string_view>

namespace tandem::tok {

// The code point standing for byte b.
char32_t ByteToChar(unsigned char b);
// The byte a code point stands for, or -1 if it is not in the alphabet.
int CharToByte(char32_t c);

// Raw bytes -> their byte-level string.
std::string BytesToByteLevel(std::string_view bytes);
// Byte-level string -> raw bytes; false (out unspecified) if a character is outside the alphabet.
bool ByteLevelToBytes(std::string_view token, std::string* out);

}  // namespace tandem::tok
