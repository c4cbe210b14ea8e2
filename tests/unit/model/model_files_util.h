// Test helpers that write model directories: temp dirs, JSON files, safetensors files.
#pragma once

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace tandem::testing {

// A fresh directory under the system temp dir, removed with its contents on destruction.
class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = (std::filesystem::temp_directory_path() /
             ("tandem_model_test_" + std::to_string(rd()) + std::to_string(rd())))
                .string();
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline void WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  ASSERT_TRUE(out.good()) << path;
}

inline void WriteJson(const std::string& path, const nlohmann::json& j) { WriteText(path, j.dump(2)); }

// A tensor to write: raw little-endian bytes of `dtype`.
struct RawTensor {
  std::string name;
  std::string dtype;  // "F32", "BF16", "F16", "I64", ...
  std::vector<int64_t> shape;
  std::string bytes;
};

inline uint16_t FloatToBf16Bits(float f) {  // round to nearest even (finite inputs)
  uint32_t b;
  std::memcpy(&b, &f, 4);
  b += 0x7fffu + ((b >> 16) & 1u);
  return static_cast<uint16_t>(b >> 16);
}

inline RawTensor F32Tensor(const std::string& name, std::vector<int64_t> shape,
                           const std::vector<float>& v) {
  RawTensor t{name, "F32", std::move(shape), std::string(v.size() * 4, '\0')};
  std::memcpy(t.bytes.data(), v.data(), v.size() * 4);
  return t;
}

inline RawTensor Bf16Tensor(const std::string& name, std::vector<int64_t> shape,
                            const std::vector<float>& v) {
  RawTensor t{name, "BF16", std::move(shape), std::string(v.size() * 2, '\0')};
  for (size_t i = 0; i < v.size(); ++i) {
    const uint16_t b = FloatToBf16Bits(v[i]);
    std::memcpy(t.bytes.data() + 2 * i, &b, 2);
  }
  return t;
}

// Half bits given directly (exact values the test knows).
inline RawTensor F16Tensor(const std::string& name, std::vector<int64_t> shape,
                           const std::vector<uint16_t>& bits) {
  RawTensor t{name, "F16", std::move(shape), std::string(bits.size() * 2, '\0')};
  std::memcpy(t.bytes.data(), bits.data(), bits.size() * 2);
  return t;
}

// Writes a safetensors file: 8-byte LE header length, JSON header, data.
inline void WriteSafetensors(const std::string& path, const std::vector<RawTensor>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  header["__metadata__"] = {{"format", "pt"}};
  std::string data;
  for (const RawTensor& t : tensors) {
    header[t.name] = {{"dtype", t.dtype},
                      {"shape", t.shape},
                      {"data_offsets", {data.size(), data.size() + t.bytes.size()}}};
    data += t.bytes;
  }
  std::string h = header.dump();
  while (h.size() % 8 != 0) h += ' ';
  std::string out(8, '\0');
  uint64_t n = h.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  WriteText(path, out + h + data);
}

}  // namespace tandem::testing
