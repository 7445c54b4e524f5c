#include "serving/archive.h"

#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

namespace sluice::serving {

namespace fs = std::filesystem;

std::string Sha256::Hex() {
  unsigned char d[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_DigestFinal_ex(ctx_, d, &n);
  static const char* k = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < n; ++i) {
    out += k[d[i] >> 4];
    out += k[d[i] & 15];
  }
  return out;
}

std::string ErrnoMessage(const std::string& what) { return what + ": " + std::strerror(errno); }

std::string HashOf(std::string_view s) {
  Sha256 h;
  h.Update(s.data(), s.size());
  return h.Hex();
}

StatusOr<std::string> HashFile(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return InvalidArgument(ErrnoMessage("cannot read " + path));
  Sha256 h;
  std::vector<char> buf(1 << 20);
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), f)) > 0) h.Update(buf.data(), n);
  const bool err = std::ferror(f);
  std::fclose(f);
  if (err) return InvalidArgument(ErrnoMessage("reading " + path));
  return h.Hex();
}

Status WriteAll(FILE* f, const char* p, size_t n, const std::string& path) {
  if (std::fwrite(p, 1, n, f) != n) return InvalidArgument(ErrnoMessage("writing " + path));
  return Status::Ok();
}

namespace {

// --- archive reading ---

class Reader {
 public:
  virtual ~Reader() = default;
  // Up to n bytes; 0 at the end.
  virtual StatusOr<size_t> Read(char* buf, size_t n) = 0;
};

class FileReader : public Reader {
 public:
  explicit FileReader(FILE* f) : f_(f) {}
  StatusOr<size_t> Read(char* buf, size_t n) override {
    const size_t got = std::fread(buf, 1, n, f_);
    if (got == 0 && std::ferror(f_)) return InvalidArgument(ErrnoMessage("reading the archive"));
    return got;
  }

 private:
  FILE* f_;
};

class GzipReader : public Reader {
 public:
  explicit GzipReader(Reader* in) : in_(in), buf_(1 << 16) {
    std::memset(&z_, 0, sizeof(z_));
    ok_ = inflateInit2(&z_, 16 + MAX_WBITS) == Z_OK;
  }
  ~GzipReader() override { inflateEnd(&z_); }
  StatusOr<size_t> Read(char* out, size_t n) override {
    if (!ok_) return Internal("zlib: inflateInit2 failed");
    if (done_) return size_t{0};
    z_.next_out = reinterpret_cast<Bytef*>(out);
    z_.avail_out = static_cast<uInt>(n);
    while (z_.avail_out == n) {
      if (z_.avail_in == 0) {
        ASSIGN_OR_RETURN(size_t got, in_->Read(buf_.data(), buf_.size()));
        if (got == 0) return InvalidArgument("truncated archive: the gzip stream is cut short");
        z_.next_in = reinterpret_cast<Bytef*>(buf_.data());
        z_.avail_in = static_cast<uInt>(got);
      }
      const int r = inflate(&z_, Z_NO_FLUSH);
      if (r == Z_STREAM_END) {
        done_ = true;
        break;
      }
      if (r != Z_OK && r != Z_BUF_ERROR) {
        return InvalidArgument(std::string("corrupt archive: gzip: ") +
                               (z_.msg ? z_.msg : "inflate failed"));
      }
    }
    return n - z_.avail_out;
  }

 private:
  Reader* in_;
  std::vector<char> buf_;
  z_stream z_;
  bool ok_ = false, done_ = false;
};

class ZstdReader : public Reader {
 public:
  explicit ZstdReader(Reader* in) : in_(in), buf_(ZSTD_DStreamInSize()), z_(ZSTD_createDStream()) {}
  ~ZstdReader() override { ZSTD_freeDStream(z_); }
  StatusOr<size_t> Read(char* out, size_t n) override {
    if (z_ == nullptr) return Internal("zstd: ZSTD_createDStream failed");
    ZSTD_outBuffer o{out, n, 0};
    while (o.pos == 0) {
      if (in_buf_.pos == in_buf_.size) {
        if (frame_done_ && eof_) return size_t{0};
        ASSIGN_OR_RETURN(size_t got, in_->Read(buf_.data(), buf_.size()));
        if (got == 0) {
          eof_ = true;
          if (frame_done_) return size_t{0};
          return InvalidArgument("truncated archive: the zstd stream is cut short");
        }
        in_buf_ = ZSTD_inBuffer{buf_.data(), got, 0};
      }
      const size_t r = ZSTD_decompressStream(z_, &o, &in_buf_);
      if (ZSTD_isError(r)) {
        return InvalidArgument(std::string("corrupt archive: zstd: ") + ZSTD_getErrorName(r));
      }
      frame_done_ = r == 0;  // a frame ended (another may follow: concatenated frames)
    }
    return o.pos;
  }

 private:
  Reader* in_;
  std::vector<char> buf_;
  ZSTD_DStream* z_;
  ZSTD_inBuffer in_buf_{nullptr, 0, 0};
  bool frame_done_ = false, eof_ = false;
};

// Exactly n bytes, or the archive is truncated.
Status ReadFull(Reader* r, char* buf, size_t n, const std::string& what) {
  size_t at = 0;
  while (at < n) {
    ASSIGN_OR_RETURN(size_t got, r->Read(buf + at, n - at));
    if (got == 0) return InvalidArgument("truncated archive: it ends inside " + what);
    at += got;
  }
  return Status::Ok();
}

StatusOr<int64_t> Octal(const char* p, size_t n, const std::string& what) {
  int64_t v = 0;
  size_t i = 0;
  while (i < n && (p[i] == ' ' || p[i] == '\0')) ++i;
  bool any = false;
  for (; i < n && p[i] >= '0' && p[i] <= '7'; ++i) {
    v = v * 8 + (p[i] - '0');
    any = true;
    if (v > (int64_t{1} << 50)) break;
  }
  for (; i < n; ++i) {
    if (p[i] != ' ' && p[i] != '\0') return InvalidArgument("corrupt archive: " + what);
  }
  if (!any) return InvalidArgument("corrupt archive: " + what);
  return v;
}

// "a/./b" -> "a/b"; refuses absolute paths, "..", empty names.
StatusOr<std::string> SafeRelative(const std::string& name) {
  if (name.empty() || name[0] == '/') {
    return InvalidArgument("archive entry \"" + name + "\": absolute or empty paths are refused");
  }
  std::string out;
  size_t pos = 0;
  while (pos <= name.size()) {
    size_t end = name.find('/', pos);
    if (end == std::string::npos) end = name.size();
    const std::string part = name.substr(pos, end - pos);
    if (part == "..") {
      return InvalidArgument("archive entry \"" + name + "\": \"..\" is refused");
    }
    if (!part.empty() && part != ".") out += (out.empty() ? "" : "/") + part;
    pos = end + 1;
  }
  return out;
}

// Extracts a tar stream into `root` (an empty directory).
Status ExtractTar(Reader* r, const fs::path& root, std::vector<FileEntry>* files) {
  char h[512];
  std::string long_name;
  std::vector<char> buf(1 << 16);
  for (int entry = 0;; ++entry) {
    ASSIGN_OR_RETURN(size_t got, r->Read(h, 512));
    if (got == 0) {
      return InvalidArgument("truncated archive: it ends without its end-of-archive blocks");
    }
    if (got < 512) RETURN_IF_ERROR(ReadFull(r, h + got, 512 - got, "a header"));
    if (std::all_of(h, h + 512, [](char c) { return c == 0; })) return Status::Ok();
    ASSIGN_OR_RETURN(int64_t sum, Octal(h + 148, 8, "header checksum"));
    int64_t mine = 0;
    for (int i = 0; i < 512; ++i) {
      mine += (i >= 148 && i < 156) ? ' ' : static_cast<unsigned char>(h[i]);
    }
    if (mine != sum) {
      return InvalidArgument("corrupt archive: the header checksum of entry " +
                             std::to_string(entry) + " does not match");
    }
    ASSIGN_OR_RETURN(int64_t size, Octal(h + 124, 12, "entry size"));
    const char type = h[156];
    std::string name(h, strnlen(h, 100));
    if (std::memcmp(h + 257, "ustar", 5) == 0 && h[345] != 0) {
      name = std::string(h + 345, strnlen(h + 345, 155)) + "/" + name;
    }
    if (!long_name.empty()) {
      name = long_name;
      long_name.clear();
    }
    const int64_t padded = (size + 511) / 512 * 512;
    auto read_data = [&](std::string* out) -> Status {
      if (size > (16 << 20)) return InvalidArgument("corrupt archive: an oversized header entry");
      std::string d(static_cast<size_t>(padded), '\0');
      RETURN_IF_ERROR(ReadFull(r, d.data(), d.size(), "entry " + std::to_string(entry)));
      d.resize(static_cast<size_t>(size));
      *out = std::move(d);
      return Status::Ok();
    };
    if (type == 'L') {  // GNU long name of the next entry
      RETURN_IF_ERROR(read_data(&long_name));
      long_name = long_name.substr(0, strnlen(long_name.c_str(), long_name.size()));
      continue;
    }
    if (type == 'x' || type == 'g') {  // pax headers: the next entry's path
      std::string d;
      RETURN_IF_ERROR(read_data(&d));
      if (type == 'g') continue;
      size_t at = 0;
      while (at < d.size()) {
        const size_t sp = d.find(' ', at);
        if (sp == std::string::npos) break;
        const int64_t len = std::atoll(d.c_str() + at);
        if (len <= 0 || at + static_cast<size_t>(len) > d.size()) {
          return InvalidArgument("corrupt archive: a pax header");
        }
        const std::string rec = d.substr(sp + 1, at + static_cast<size_t>(len) - sp - 2);
        if (rec.rfind("path=", 0) == 0) long_name = rec.substr(5);
        at += static_cast<size_t>(len);
      }
      continue;
    }
    ASSIGN_OR_RETURN(std::string rel, SafeRelative(name));
    if (type == '5') {
      if (!rel.empty()) fs::create_directories(root / rel);
      continue;
    }
    if (type != '0' && type != '\0' && type != '7') {
      return InvalidArgument("archive entry \"" + name +
                             "\": links and special files are refused (regular files and "
                             "directories only)");
    }
    if (rel.empty()) return InvalidArgument("archive entry \"" + name + "\": no file name");
    const fs::path dst = root / rel;
    std::error_code ec;
    fs::create_directories(dst.parent_path(), ec);
    if (ec)
      return InvalidArgument("cannot create " + dst.parent_path().string() + ": " + ec.message());
    FILE* f = std::fopen(dst.c_str(), "wb");
    if (!f) return InvalidArgument(ErrnoMessage("cannot create " + dst.string()));
    Sha256 hash;
    int64_t left = size;
    Status s;
    while (left > 0 && s.ok()) {
      const size_t n =
          static_cast<size_t>(std::min<int64_t>(left, static_cast<int64_t>(buf.size())));
      s = ReadFull(r, buf.data(), n, "\"" + name + "\"");
      if (s.ok()) s = WriteAll(f, buf.data(), n, dst.string());
      hash.Update(buf.data(), n);
      left -= static_cast<int64_t>(n);
    }
    if (std::fclose(f) != 0 && s.ok()) s = InvalidArgument(ErrnoMessage("writing " + dst.string()));
    RETURN_IF_ERROR(s);
    if (padded > size) {
      RETURN_IF_ERROR(ReadFull(r, buf.data(), static_cast<size_t>(padded - size),
                               "the padding of \"" + name + "\""));
    }
    files->push_back({rel, size, hash.Hex()});
  }
}

}  // namespace

Status ExtractArchive(const std::string& archive, const fs::path& root,
                      std::vector<FileEntry>* files, std::string* sha) {
  FILE* f = std::fopen(archive.c_str(), "rb");
  if (!f) return InvalidArgument(ErrnoMessage("cannot read " + archive));
  unsigned char magic[4] = {0, 0, 0, 0};
  const size_t got = std::fread(magic, 1, 4, f);
  std::rewind(f);
  FileReader raw(f);
  std::unique_ptr<Reader> unpack;
  if (got >= 2 && magic[0] == 0x1f && magic[1] == 0x8b) {
    unpack = std::make_unique<GzipReader>(&raw);
  } else if (got == 4 && magic[0] == 0x28 && magic[1] == 0xb5 && magic[2] == 0x2f &&
             magic[3] == 0xfd) {  // a zstd frame
    unpack = std::make_unique<ZstdReader>(&raw);
  }
  Reader* r = unpack ? unpack.get() : &raw;
  Status s = ExtractTar(r, root, files);
  // Read the rest through the decompressor, so that the gzip CRC / zstd checksum at the end of
  // the stream is verified: a flipped byte in a file's data fails here. After the
  // end-of-archive blocks tar writes only record padding (10 KiB at most).
  if (s.ok()) {
    std::vector<char> b(1 << 16);
    int64_t trailer = 0;
    while (s.ok()) {
      auto n = r->Read(b.data(), b.size());
      if (!n.ok()) {
        s = n.status();
      } else if (*n == 0) {
        break;
      } else if ((trailer += static_cast<int64_t>(*n)) > (1 << 20)) {
        s = InvalidArgument("corrupt archive: over 1 MiB of data after its end-of-archive blocks");
      }
    }
  }
  std::fclose(f);
  RETURN_IF_ERROR(s);
  if (sha->empty()) {
    ASSIGN_OR_RETURN(*sha, HashFile(archive));
  }
  return Status::Ok();
}

}  // namespace sluice::serving
