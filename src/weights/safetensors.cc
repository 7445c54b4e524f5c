#include "weights/safetensors.h"

#include <fcntl.h>
#include <simdjson.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

namespace sluice {

namespace fs = std::filesystem;

class MappedFile {
 public:
  ~MappedFile() {
    if (data_ != nullptr) munmap(data_, size_);
  }
  static StatusOr<std::unique_ptr<MappedFile>> Open(const std::string& path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return NotFound("cannot open " + path + ": " + std::strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
      ::close(fd);
      return Internal("cannot stat " + path);
    }
    auto f = std::unique_ptr<MappedFile>(new MappedFile());
    f->path_ = path;
    f->size_ = static_cast<size_t>(st.st_size);
    if (f->size_ > 0) {
      void* p = mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
      if (p == MAP_FAILED) {
        ::close(fd);
        return Internal("cannot mmap " + path + ": " + std::strerror(errno));
      }
      f->data_ = p;
    }
    ::close(fd);
    return f;
  }
  const uint8_t* data() const { return static_cast<const uint8_t*>(data_); }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile() = default;
  std::string path_;
  void* data_ = nullptr;
  size_t size_ = 0;
};

namespace {

bool ParseSafetensorsDType(std::string_view s, DType* out) {
  if (s == "F32")
    *out = DType::kF32;
  else if (s == "F16")
    *out = DType::kF16;
  else if (s == "BF16")
    *out = DType::kBF16;
  else if (s == "I32")
    *out = DType::kI32;
  else if (s == "I64")
    *out = DType::kI64;
  else
    return false;
  return true;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << "]";
  return os.str();
}

}  // namespace

WeightStore::WeightStore() = default;
WeightStore::~WeightStore() = default;
WeightStore::WeightStore(WeightStore&&) noexcept = default;
WeightStore& WeightStore::operator=(WeightStore&&) noexcept = default;

Status WeightStore::AddFile(const std::string& path) {
  ASSIGN_OR_RETURN(auto file, MappedFile::Open(path));
  const size_t size = file->size();
  if (size < 8)
    return InvalidArgument(path + ": truncated safetensors file (" + std::to_string(size) +
                           " bytes, no header)");
  uint64_t header_len = 0;
  std::memcpy(&header_len, file->data(), 8);
  if (header_len > size - 8 || header_len > (100u << 20)) {
    return InvalidArgument(path + ": safetensors header length " + std::to_string(header_len) +
                           " exceeds file size " + std::to_string(size) +
                           " (truncated or not a safetensors file)");
  }
  const uint8_t* base = file->data() + 8 + header_len;
  const size_t data_size = size - 8 - header_len;

  simdjson::dom::parser parser;
  simdjson::padded_string header(reinterpret_cast<const char*>(file->data() + 8), header_len);
  simdjson::dom::element doc;
  if (auto err = parser.parse(header).get(doc)) {
    return InvalidArgument(path +
                           ": invalid safetensors JSON header: " + simdjson::error_message(err));
  }
  simdjson::dom::object obj;
  if (doc.get(obj)) return InvalidArgument(path + ": safetensors header is not a JSON object");
  for (auto field : obj) {
    std::string name(field.key);
    if (name == "__metadata__") continue;
    auto ctx = [&](const std::string& what) {
      return InvalidArgument(path + ": tensor '" + name + "': " + what);
    };
    std::string_view dtype_str;
    if (field.value["dtype"].get(dtype_str)) return ctx("missing dtype");
    HostTensor t;
    t.name = name;
    if (!ParseSafetensorsDType(dtype_str, &t.dtype)) {
      return Unsupported(path + ": tensor '" + name + "' has unsupported dtype " +
                         std::string(dtype_str) + " (supported: F32, F16, BF16, I32, I64)");
    }
    simdjson::dom::array shape, offsets;
    if (field.value["shape"].get(shape)) return ctx("missing shape");
    if (field.value["data_offsets"].get(offsets)) return ctx("missing data_offsets");
    int64_t numel = 1;
    for (auto d : shape) {
      int64_t v;
      if (d.get(v) || v < 0) return ctx("bad shape entry");
      t.shape.push_back(v);
      numel *= v;
    }
    uint64_t begin = 0, end = 0;
    std::vector<uint64_t> offs;
    for (auto o : offsets) {
      uint64_t v;
      if (o.get(v)) return ctx("bad data_offsets");
      offs.push_back(v);
    }
    if (offs.size() != 2) return ctx("data_offsets must have 2 entries");
    begin = offs[0];
    end = offs[1];
    if (begin > end || end > data_size) {
      return ctx("data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                 ") outside the data section of " + std::to_string(data_size) +
                 " bytes (truncated file?)");
    }
    if (end - begin != static_cast<uint64_t>(numel) * DTypeSize(t.dtype)) {
      return ctx("shape " + ShapeString(t.shape) + " x " + std::string(dtype_str) + " needs " +
                 std::to_string(numel * DTypeSize(t.dtype)) + " bytes but data_offsets span " +
                 std::to_string(end - begin));
    }
    t.data = base + begin;
    if (index_.count(name)) return ctx("tensor defined twice (also in " + tensor_file_[name] + ")");
    index_[name] = std::move(t);
    tensor_file_[name] = path;
  }
  files_.push_back(std::move(file));
  return Status::Ok();
}

StatusOr<WeightStore> WeightStore::OpenFile(const std::string& path) {
  WeightStore store;
  RETURN_IF_ERROR(store.AddFile(path));
  store.description_ = path;
  return store;
}

StatusOr<WeightStore> WeightStore::OpenDirectory(const std::string& dir) {
  const fs::path d(dir);
  if (!fs::is_directory(d)) return NotFound("model directory " + dir + " does not exist");
  WeightStore store;
  const fs::path index = d / "model.safetensors.index.json";
  const fs::path single = d / "model.safetensors";
  if (fs::exists(index)) {
    simdjson::dom::parser parser;
    simdjson::dom::element doc;
    if (auto err = parser.load(index.string()).get(doc)) {
      return InvalidArgument(index.string() + ": " + simdjson::error_message(err));
    }
    simdjson::dom::object map;
    if (doc["weight_map"].get(map)) {
      return InvalidArgument(index.string() + ": missing \"weight_map\" object");
    }
    std::set<std::string> shards;
    std::map<std::string, std::string> expected;
    for (auto kv : map) {
      std::string_view shard;
      if (kv.value.get(shard)) return InvalidArgument(index.string() + ": bad weight_map entry");
      shards.insert(std::string(shard));
      expected[std::string(kv.key)] = std::string(shard);
    }
    for (const auto& s : shards) {
      const fs::path p = d / s;
      if (!fs::exists(p)) {
        return NotFound(index.string() + " names shard " + s + " which does not exist");
      }
      RETURN_IF_ERROR(store.AddFile(p.string()));
    }
    for (const auto& [name, shard] : expected) {
      if (!store.Has(name)) {
        return InvalidArgument(index.string() + ": tensor '" + name + "' listed in shard " + shard +
                               " is not in that file");
      }
    }
    store.description_ = index.string() + " (" + std::to_string(shards.size()) + " shards)";
    return store;
  }
  if (fs::exists(single)) {
    RETURN_IF_ERROR(store.AddFile(single.string()));
    store.description_ = single.string();
    return store;
  }
  for (const char* pickle : {"pytorch_model.bin", "model.bin", "pytorch_model.bin.index.json",
                             "model.pt", "pytorch_model.pt"}) {
    if (fs::exists(d / pickle)) {
      return Unsupported(
          (d / pickle).string() +
          " is a PyTorch pickle checkpoint; sluice only loads safetensors (pickle files can run "
          "arbitrary code). Convert it once, e.g. in Python: "
          "model = AutoModel.from_pretrained(dir); model.save_pretrained(dir, "
          "safe_serialization=True)");
    }
  }
  return NotFound("no model.safetensors or model.safetensors.index.json in " + dir);
}

StatusOr<HostTensor> WeightStore::Get(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) {
    return NotFound("tensor '" + name + "' not found in " + description_);
  }
  return it->second;
}

StatusOr<HostTensor> WeightStore::Get(const std::string& name,
                                      const std::vector<int64_t>& shape) const {
  ASSIGN_OR_RETURN(HostTensor t, Get(name));
  if (t.shape != shape) {
    return FailedPrecondition("tensor '" + name + "' in " + tensor_file_.at(name) + " has shape " +
                              ShapeString(t.shape) + ", expected " + ShapeString(shape) +
                              " from config.json");
  }
  return t;
}

std::vector<std::string> WeightStore::Names() const {
  std::vector<std::string> out;
  for (const auto& kv : index_) out.push_back(kv.first);
  return out;
}

DType WeightStore::DominantDType() const {
  std::map<DType, int64_t> count;
  for (const auto& kv : index_) {
    if (kv.second.dtype == DType::kF32 || kv.second.dtype == DType::kF16 ||
        kv.second.dtype == DType::kBF16) {
      count[kv.second.dtype] += kv.second.numel();
    }
  }
  DType best = DType::kF32;
  int64_t best_n = -1;
  for (const auto& [t, n] : count) {
    if (n > best_n) best = t, best_n = n;
  }
  return best;
}

int64_t WeightStore::TotalParameters() const {
  int64_t n = 0;
  for (const auto& kv : index_) n += kv.second.numel();
  return n;
}

}  // namespace sluice
