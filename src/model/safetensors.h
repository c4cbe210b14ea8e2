// Memory-mapped reader of safetensors checkpoints: one `model.safetensors`, or shards listed by
// `model.safetensors.index.json` ({"weight_map": {tensor name: shard file}}).
//
// Format (huggingface/safetensors README): 8-byte little-endian header length N, then N bytes of
// JSON {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}, then the
// data; offsets are relative to the first byte after the header.
//
// Errors: NotFound (no checkpoint file), DataLoss (truncated file, header or offsets beyond the
// file, naming the file), InvalidArgument (malformed header JSON), Unimplemented (a tensor of a
// dtype other than BF16/F16/F32/F8_E4M3 when it is read as floats).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"

namespace tandem {

enum class DType { kBF16, kF16, kF32, kF8E4M3, kOther };

// The name as safetensors writes it ("BF16", ...) and the element size (0 when unknown).
const char* DTypeName(DType dtype);

// One tensor inside a mapped file. `data` stays valid while the owning SafetensorsFile lives.
struct TensorView {
  std::string name;
  DType dtype = DType::kOther;
  std::string dtype_name;        // as written in the header ("BF16", "I64", ...)
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
  size_t num_bytes = 0;
  std::string file;              // the file it lives in (for error messages)

  int64_t num_elements() const;
};

// "[151936, 256]"
std::string ShapeString(std::span<const int64_t> shape);

// Converts a BF16/F16/F32/F8_E4M3 tensor to fp32 into `out` (resized to num_elements()).
// BF16: exact (bits << 16). F16: exact (every half is a float), subnormals, inf and NaN kept.
// F8_E4M3: the stored values, exact, without any scale (kernels/cpu/fp8.h; weights.h applies it).
// Unimplemented for other dtypes, naming the tensor and its dtype.
Status TensorToFloat(const TensorView& t, std::vector<float>* out);

float HalfToFloat(uint16_t h);
float BFloat16ToFloat(uint16_t b);

// One mapped .safetensors file (read-only mmap, unmapped on destruction).
class SafetensorsFile {
 public:
  static Result<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::map<std::string, TensorView>& tensors() const { return tensors_; }

 private:
  SafetensorsFile() = default;
  std::string path_;
  void* map_ = nullptr;
  size_t size_ = 0;
  std::map<std::string, TensorView> tensors_;
};

// All tensors of a model directory, over one or several files.
class SafetensorsModel {
 public:
  // <dir>/model.safetensors.index.json when present, else <dir>/model.safetensors.
  static Result<SafetensorsModel> Open(const std::string& model_dir);

  // NotFound naming the tensor when absent.
  Result<const TensorView*> Find(const std::string& name) const;
  bool Contains(const std::string& name) const { return index_.count(name) != 0; }
  std::vector<std::string> Names() const;
  size_t num_files() const { return files_.size(); }

 private:
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorView*> index_;
};

}  // namespace tandem
