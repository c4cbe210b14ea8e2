#include "model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "common/file_util.h"
#include "kernels/cpu/fp8.h"
#include "kernels/cpu/weight_matrix.h"

namespace tandem {
namespace {

using nlohmann::json;

struct DTypeInfo {
  const char* name;
  DType dtype;
  size_t size;
};

constexpr DTypeInfo kDTypes[] = {
    {"BF16", DType::kBF16, 2}, {"F16", DType::kF16, 2},   {"F32", DType::kF32, 4},
    {"F64", DType::kOther, 8}, {"I64", DType::kOther, 8}, {"U64", DType::kOther, 8},
    {"I32", DType::kOther, 4}, {"U32", DType::kOther, 4}, {"I16", DType::kOther, 2},
    {"U16", DType::kOther, 2}, {"I8", DType::kOther, 1},  {"U8", DType::kOther, 1},
    {"BOOL", DType::kOther, 1}, {"F8_E4M3", DType::kF8E4M3, 1}, {"F8_E5M2", DType::kOther, 1},
};

const DTypeInfo* FindDType(const std::string& name) {
  for (const DTypeInfo& d : kDTypes) {
    if (name == d.name) return &d;
  }
  return nullptr;
}

uint64_t ReadLE64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kBF16: return "BF16";
    case DType::kF16: return "F16";
    case DType::kF32: return "F32";
    case DType::kF8E4M3: return "F8_E4M3";
    case DType::kOther: break;
  }
  return "other";
}

int64_t TensorView::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string ShapeString(std::span<const int64_t> shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

float BFloat16ToFloat(uint16_t b) { return cpu::Bf16BitsToFloat(b); }

float HalfToFloat(uint16_t h) { return cpu::HalfBitsToFloat(h); }

Status TensorToFloat(const TensorView& t, std::vector<float>* out) {
  const int64_t n = t.num_elements();
  switch (t.dtype) {
    case DType::kBF16: {
      out->resize(n);
      for (int64_t i = 0; i < n; ++i) {
        uint16_t b;
        std::memcpy(&b, t.data + 2 * i, 2);
        (*out)[i] = BFloat16ToFloat(b);
      }
      return Status::Ok();
    }
    case DType::kF16: {
      out->resize(n);
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, t.data + 2 * i, 2);
        (*out)[i] = HalfToFloat(h);
      }
      return Status::Ok();
    }
    case DType::kF32:
      out->resize(n);
      if (n) std::memcpy(out->data(), t.data, n * 4);
      return Status::Ok();
    case DType::kF8E4M3:
      out->resize(n);
      for (int64_t i = 0; i < n; ++i) (*out)[i] = cpu::Fp8E4M3ToFloat(t.data[i]);
      return Status::Ok();
    case DType::kOther:
      break;
  }
  return Err(StatusCode::kUnimplemented,
             "tensor {} in {} has dtype {}, which is not supported (BF16, F16, F32, F8_E4M3)", t.name,
             t.file, t.dtype_name);
}

Result<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return Err(StatusCode::kNotFound, "file not found: {}", path);
  }
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Err(StatusCode::kDataLoss, "cannot open {}: {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    return Err(StatusCode::kDataLoss, "cannot stat {}", path);
  }
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  f->size_ = static_cast<size_t>(st.st_size);
  if (f->size_ < 8) {
    ::close(fd);
    return Err(StatusCode::kDataLoss, "{} is truncated: {} bytes, no safetensors header", path,
               f->size_);
  }
  void* map = ::mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) {
    return Err(StatusCode::kDataLoss, "cannot mmap {}: {}", path, std::strerror(errno));
  }
  f->map_ = map;  // unmapped by ~SafetensorsFile from here on
  const uint8_t* base = static_cast<const uint8_t*>(map);
  const uint64_t header_len = ReadLE64(base);
  if (header_len > f->size_ - 8) {
    return Err(StatusCode::kDataLoss,
               "{} is truncated: header of {} bytes does not fit in a file of {} bytes", path,
               header_len, f->size_);
  }
  json header;
  try {
    header = json::parse(base + 8, base + 8 + header_len);
  } catch (const json::parse_error& e) {
    return Err(StatusCode::kInvalidArgument, "{}: safetensors header is not valid JSON: {}", path,
               e.what());
  }
  if (!header.is_object()) {
    return Err(StatusCode::kInvalidArgument, "{}: safetensors header is not a JSON object", path);
  }
  const uint8_t* data = base + 8 + header_len;
  const uint64_t data_size = f->size_ - 8 - header_len;
  for (auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    auto bad = [&](const char* what) {
      return Err(StatusCode::kInvalidArgument, "{}: tensor {}: {}", path, name, what);
    };
    if (!entry.is_object() || !entry.contains("dtype") || !entry["dtype"].is_string() ||
        !entry.contains("shape") || !entry["shape"].is_array() ||
        !entry.contains("data_offsets") || !entry["data_offsets"].is_array() ||
        entry["data_offsets"].size() != 2) {
      return bad("needs dtype, shape and data_offsets [begin, end]");
    }
    TensorView t;
    t.name = name;
    t.file = path;
    t.dtype_name = entry["dtype"].get<std::string>();
    const DTypeInfo* info = FindDType(t.dtype_name);
    t.dtype = info ? info->dtype : DType::kOther;
    for (const json& d : entry["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0) return bad("shape must be non-negative ints");
      t.shape.push_back(d.get<int64_t>());
    }
    const json& off = entry["data_offsets"];
    if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned()) {
      return bad("data_offsets must be non-negative ints");
    }
    const uint64_t begin = off[0].get<uint64_t>();
    const uint64_t end = off[1].get<uint64_t>();
    if (begin > end) return bad("data_offsets begin > end");
    if (end > data_size) {
      return Err(StatusCode::kDataLoss,
                 "{} is truncated: tensor {} needs bytes [{}, {}) of the data section, which has "
                 "{} bytes", path, name, begin, end, data_size);
    }
    t.data = data + begin;
    t.num_bytes = end - begin;
    if (info != nullptr) {
      const uint64_t want = static_cast<uint64_t>(t.num_elements()) * info->size;
      if (want != t.num_bytes) {
        return Err(StatusCode::kDataLoss, "{}: tensor {} of shape {} {} needs {} bytes, has {}",
                   path, name, ShapeString(t.shape), t.dtype_name, want, t.num_bytes);
      }
    }
    f->tensors_.emplace(name, std::move(t));
  }
  return f;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_ != nullptr) ::munmap(map_, size_);
}

Result<SafetensorsModel> SafetensorsModel::Open(const std::string& model_dir) {
  namespace fs = std::filesystem;
  SafetensorsModel model;
  const std::string index_path = (fs::path(model_dir) / "model.safetensors.index.json").string();
  std::error_code ec;
  if (fs::exists(index_path, ec)) {
    TANDEM_ASSIGN_OR_RETURN(nlohmann::json index, ReadJsonFile(index_path));
    if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
      return Err(StatusCode::kInvalidArgument, "{}: no 'weight_map' object", index_path);
    }
    std::map<std::string, size_t> file_ids;
    for (auto& [name, shard] : index["weight_map"].items()) {
      if (!shard.is_string()) {
        return Err(StatusCode::kInvalidArgument, "{}: weight_map[{}] is not a file name",
                   index_path, name);
      }
      const std::string shard_name = shard.get<std::string>();
      auto it = file_ids.find(shard_name);
      if (it == file_ids.end()) {
        TANDEM_ASSIGN_OR_RETURN(auto file,
                                SafetensorsFile::Open((fs::path(model_dir) / shard_name).string()));
        it = file_ids.emplace(shard_name, model.files_.size()).first;
        model.files_.push_back(std::move(file));
      }
      const SafetensorsFile& file = *model.files_[it->second];
      auto t = file.tensors().find(name);
      if (t == file.tensors().end()) {
        return Err(StatusCode::kDataLoss, "{}: index {} maps tensor {} here, but it is absent",
                   file.path(), index_path, name);
      }
      model.index_[name] = &t->second;
    }
    return model;
  }
  const std::string single = (fs::path(model_dir) / "model.safetensors").string();
  if (!fs::exists(single, ec)) {
    return Err(StatusCode::kNotFound, "no model.safetensors or model.safetensors.index.json in {}",
               model_dir);
  }
  TANDEM_ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open(single));
  for (const auto& [name, t] : file->tensors()) model.index_[name] = &t;
  model.files_.push_back(std::move(file));
  return model;
}

Result<const TensorView*> SafetensorsModel::Find(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) return Err(StatusCode::kNotFound, "tensor {} not found", name);
  return it->second;
}

std::vector<std::string> SafetensorsModel::Names() const {
  std::vector<std::string> names;
  names.reserve(index_.size());
  for (const auto& [name, t] : index_) names.push_back(name);
  return names;
}

}  // namespace tandem
