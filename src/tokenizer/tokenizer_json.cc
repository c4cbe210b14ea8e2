#include "tokenizer/tokenizer_json.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

namespace tandem::tok {

namespace {

using json = nlohmann::json;

class Handler final : public nlohmann::json_sax<json> {
 public:
  explicit Handler(TokenizerJson* out) : out_(out) {}

  bool null() override { return Value(json(nullptr)); }
  bool boolean(bool v) override { return Value(json(v)); }
  bool number_integer(number_integer_t v) override {
    if (mode_ == Mode::kVocab && depth_ == special_depth_) {
      out_->vocab.emplace_back(std::move(key_), v);
      return true;
    }
    return Value(json(v));
  }
  bool number_unsigned(number_unsigned_t v) override { return number_integer(static_cast<number_integer_t>(v)); }
  bool number_float(number_float_t v, const string_t&) override {
    return Value(json(v));
  }
  bool string(string_t& v) override {
    if (mode_ == Mode::kMerges) {
      if (depth_ == special_depth_) {  // "a b"
        const size_t sp = v.find(' ');
        if (sp == std::string::npos || v.find(' ', sp + 1) != std::string::npos) return Bad(v);
        out_->merges.emplace_back(v.substr(0, sp), v.substr(sp + 1));
      } else if (depth_ == special_depth_ + 1) {  // ["a", "b"]
        pair_.push_back(std::move(v));
      } else {
        return Bad(v);
      }
      return true;
    }
    if (mode_ == Mode::kVocab) return Bad("vocab value " + v);
    return Value(json(std::move(v)));
  }
  bool binary(binary_t&) override { return false; }
  bool key(string_t& k) override {
    key_ = std::move(k);
    return true;
  }
  bool start_object(std::size_t) override {
    if (mode_ != Mode::kNone) {
      ++depth_;
      return mode_ == Mode::kVocab ? Bad("vocab value {") : Bad("{");
    }
    const bool vocab = AtModelMember("vocab");
    json* v = Add(json::object());
    stack_.push_back(v);
    path_.push_back(std::string());
    ++depth_;
    if (vocab) {
      out_->vocab.reserve(1 << 17);
      mode_ = Mode::kVocab;
      special_depth_ = depth_;
    }
    return true;
  }
  bool end_object() override { return End(); }
  bool start_array(std::size_t) override {
    if (mode_ == Mode::kMerges) {
      ++depth_;
      pair_.clear();
      return true;
    }
    if (mode_ == Mode::kVocab) {
      ++depth_;
      return Bad("vocab value [");
    }
    const bool merges = AtModelMember("merges");
    json* v = Add(json::array());
    stack_.push_back(v);
    path_.push_back(std::string());
    ++depth_;
    if (merges) {
      out_->merges.reserve(1 << 17);
      mode_ = Mode::kMerges;
      special_depth_ = depth_;
    }
    return true;
  }
  bool end_array() override {
    if (mode_ == Mode::kMerges && depth_ == special_depth_ + 1) {
      if (pair_.size() == 2) {
        out_->merges.emplace_back(std::move(pair_[0]), std::move(pair_[1]));
      } else {
        Bad("[" + std::to_string(pair_.size()) + " items]");
      }
      --depth_;
      return true;
    }
    return End();
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    error_ = e.what();
    return false;
  }

  const std::string& error() const { return error_; }

 private:
  enum class Mode { kNone, kVocab, kMerges };

  // True if the value about to start is root["model"][name].
  bool AtModelMember(const char* name) const {
    return stack_.size() == 2 && stack_[0]->is_object() && path_[0] == "model" && stack_[1]->is_object() &&
           key_ == name;
  }
  bool Bad(const std::string& what) {
    out_->bad_entries.push_back(what);
    return true;
  }
  json* Add(json v) {
    if (stack_.empty()) {
      out_->rest = std::move(v);
      return &out_->rest;
    }
    json* parent = stack_.back();
    if (parent->is_array()) {
      parent->push_back(std::move(v));
      return &parent->back();
    }
    path_.back() = key_;
    json& slot = (*parent)[key_];
    slot = std::move(v);
    return &slot;
  }
  bool Value(json v) {
    if (mode_ != Mode::kNone) return Bad(v.dump());
    Add(std::move(v));
    return true;
  }
  bool End() {
    --depth_;
    if (mode_ != Mode::kNone) {
      if (depth_ + 1 > special_depth_) return true;  // closing something nested and already reported
      mode_ = Mode::kNone;
    }
    stack_.pop_back();
    path_.pop_back();
    return true;
  }

  TokenizerJson* out_;
  std::vector<json*> stack_;
  std::vector<std::string> path_;  // per open container: key of the member being added to it
  std::string key_;
  std::vector<std::string> pair_;
  Mode mode_ = Mode::kNone;
  int depth_ = 0;
  int special_depth_ = -1;
  std::string error_;
};

}  // namespace

Result<TokenizerJson> ParseTokenizerJson(std::string_view text, const std::string& name) {
  TokenizerJson out;
  Handler handler(&out);
  const bool ok = json::sax_parse(text.begin(), text.end(), &handler);
  if (!ok) return Err(StatusCode::kInvalidArgument, "{} is not valid JSON: {}", name, handler.error());
  return out;
}

Result<std::unique_ptr<MappedFile>> MappedFile::Open(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return Err(StatusCode::kNotFound, "file not found: {}", path);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Err(StatusCode::kDataLoss, "cannot open {}", path);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    return Err(StatusCode::kDataLoss, "cannot stat {}", path);
  }
  std::unique_ptr<MappedFile> f(new MappedFile());
  f->size_ = static_cast<size_t>(st.st_size);
  if (f->size_ > 0) {
    f->addr_ = ::mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
    if (f->addr_ == MAP_FAILED) {
      f->addr_ = nullptr;
      ::close(fd);
      return Err(StatusCode::kDataLoss, "cannot map {}", path);
    }
  }
  ::close(fd);
  return f;
}

MappedFile::~MappedFile() {
  if (addr_ != nullptr) ::munmap(addr_, size_);
}

}  // namespace tandem::tok
