// Decoders: ByteLevel, WordPiece, Metaspace, BPEDecoder, Replace, ByteFallback, Fuse, Strip,
// Sequence.
#include "tokenizer/internal.h"

namespace sluice::tok {
namespace {

void ReplaceAll(std::string* s, std::string_view from, std::string_view to) {
  if (from.empty()) return;
  std::string out;
  size_t pos = 0;
  for (size_t f = s->find(from); f != std::string::npos; f = s->find(from, pos)) {
    out.append(*s, pos, f - pos);
    out.append(to);
    pos = f + from.size();
  }
  out.append(*s, pos, std::string::npos);
  *s = std::move(out);
}

class ByteLevelDecoder : public Decoder {
 public:
  bool IsByteLevel() const override { return true; }
  Status DecodeChain(std::vector<std::string>* tokens) const override {
    std::string bytes;
    for (const auto& t : *tokens) {
      std::string tb;
      bool ok = true;
      for (size_t i = 0; i < t.size() && ok;) {
        size_t len;
        int b = CharToByte(DecodeAt(t, i, &len));
        if (b < 0)
          ok = false;
        else
          tb.push_back(static_cast<char>(b));
        i += len;
      }
      bytes += ok ? tb : t;
    }
    tokens->assign(1, LossyUtf8(bytes));
    return Status::Ok();
  }
};

class WordPieceDecoder : public Decoder {
 public:
  WordPieceDecoder(std::string prefix, bool cleanup)
      : prefix_(std::move(prefix)), cleanup_(cleanup) {}
  Status DecodeChain(std::vector<std::string>* tokens) const override {
    for (size_t i = 0; i < tokens->size(); ++i) {
      std::string& t = (*tokens)[i];
      if (i != 0) {
        if (t.compare(0, prefix_.size(), prefix_) == 0) {
          t.erase(0, prefix_.size());
        } else {
          t = " " + t;
        }
      }
      if (cleanup_) Cleanup(&t);
    }
    return Status::Ok();
  }
  static void Cleanup(std::string* t) {
    ReplaceAll(t, " .", ".");
    ReplaceAll(t, " ?", "?");
    ReplaceAll(t, " !", "!");
    ReplaceAll(t, " ,", ",");
    ReplaceAll(t, " ' ", "'");
    ReplaceAll(t, " n't", "n't");
    ReplaceAll(t, " 'm", "'m");
    ReplaceAll(t, " do not", " don't");
    ReplaceAll(t, " 's", "'s");
    ReplaceAll(t, " 've", "'ve");
    ReplaceAll(t, " 're", "'re");
  }

 private:
  std::string prefix_;
  bool cleanup_;
};

class MetaspaceDecoder : public Decoder {
 public:
  MetaspaceDecoder(std::string rep, bool prepend) : rep_(std::move(rep)), prepend_(prepend) {}
  Status DecodeChain(std::vector<std::string>* tokens) const override {
    for (size_t i = 0; i < tokens->size(); ++i) {
      ReplaceAll(&(*tokens)[i], rep_, i == 0 && prepend_ ? "" : " ");
    }
    return Status::Ok();
  }

 private:
  std::string rep_;
  bool prepend_;
};

class BpeDecoder : public Decoder {
 public:
  explicit BpeDecoder(std::string suffix) : suffix_(std::move(suffix)) {}
  Status DecodeChain(std::vector<std::string>* tokens) const override {
    for (size_t i = 0; i < tokens->size(); ++i) {
      ReplaceAll(&(*tokens)[i], suffix_, i + 1 == tokens->size() ? "" : " ");
    }
    return Status::Ok();
  }

 private:
  std::string suffix_;
};

class ReplaceDecoder : public Decoder {
 public:
  ReplaceDecoder(PatternMatcher p, std::string content)
      : p_(std::move(p)), content_(std::move(content)) {}
  Status DecodeChain(std::vector<std::string>* tokens) const override {
    for (auto& t : *tokens) {
      auto m = p_.Find(t);
      if (m.empty()) continue;
      std::string out;
      size_t last = 0;
      for (auto [s, e] : m) {
        out.append(t, last, s - last);
        out.append(content_);
        last = e;
      }
      out.append(t, last, std::string::npos);
      t = std::move(out);
    }
    return Status::Ok();
  }

 private:
  PatternMatcher p_;
  std::string content_;
};

int HexVal(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

class ByteFallbackDecoder : public Decoder {
 public:
  Status DecodeChain(std::vector<std::string>* tokens) const override {
    std::vector<std::string> out;
    std::string bytes;
    size_t nbytes = 0;
    auto flush = [&]() {
      if (nbytes == 0) return;
      if (IsValidUtf8(bytes)) {
        out.push_back(bytes);
      } else {
        for (size_t k = 0; k < nbytes; ++k) out.emplace_back("\xEF\xBF\xBD");
      }
      bytes.clear();
      nbytes = 0;
    };
    for (auto& t : *tokens) {
      int hi, lo;
      if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' && (hi = HexVal(t[3])) >= 0 &&
          (lo = HexVal(t[4])) >= 0) {
        bytes.push_back(static_cast<char>(hi * 16 + lo));
        ++nbytes;
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    *tokens = std::move(out);
    return Status::Ok();
  }
};

class FuseDecoder : public Decoder {
 public:
  Status DecodeChain(std::vector<std::string>* tokens) const override {
    std::string all;
    for (const auto& t : *tokens) all += t;
    tokens->assign(1, std::move(all));
    return Status::Ok();
  }
};

class StripDecoder : public Decoder {
 public:
  StripDecoder(char32_t c, size_t start, size_t stop) : c_(c), start_(start), stop_(stop) {}
  Status DecodeChain(std::vector<std::string>* tokens) const override {
    for (auto& t : *tokens) {
      auto cps = ToCodePoints(t);
      size_t a = 0, b = cps.size();
      for (size_t i = 0; i < start_ && i < cps.size(); ++i) {
        if (cps[i] != c_) break;
        a = i + 1;
      }
      for (size_t i = 0; i < stop_ && i < cps.size(); ++i) {
        size_t idx = cps.size() - i - 1;
        if (cps[idx] != c_) break;
        b = idx;
      }
      std::string out;
      for (size_t i = a; i < b; ++i) AppendUtf8(&out, cps[i]);
      t = std::move(out);
    }
    return Status::Ok();
  }

 private:
  char32_t c_;
  size_t start_, stop_;
};

class SequenceDecoder : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> d) : d_(std::move(d)) {}
  Status DecodeChain(std::vector<std::string>* tokens) const override {
    for (const auto& d : d_) RETURN_IF_ERROR(d->DecodeChain(tokens));
    return Status::Ok();
  }

 private:
  std::vector<std::unique_ptr<Decoder>> d_;
};

}  // namespace

std::unique_ptr<Decoder> MakeWordPieceDecoder(std::string prefix, bool cleanup) {
  return std::make_unique<WordPieceDecoder>(std::move(prefix), cleanup);
}

StatusOr<std::unique_ptr<Decoder>> MakeDecoder(JsonValue j) {
  std::string type = JType(j);
  if (type == "ByteLevel") return std::unique_ptr<Decoder>(new ByteLevelDecoder());
  if (type == "WordPiece") {
    return MakeWordPieceDecoder(std::string(JStr(j, "prefix").value_or("##")),
                                JBool(j, "cleanup").value_or(true));
  }
  if (type == "Metaspace") {
    bool prepend = true;
    if (auto s = JStr(j, "prepend_scheme"))
      prepend = *s != "never";
    else if (auto a = JBool(j, "add_prefix_space"))
      prepend = *a;
    return std::unique_ptr<Decoder>(new MetaspaceDecoder(
        std::string(JStr(j, "replacement").value_or("\xE2\x96\x81")), prepend));
  }
  if (type == "BPEDecoder") {
    return std::unique_ptr<Decoder>(
        new BpeDecoder(std::string(JStr(j, "suffix").value_or("</w>"))));
  }
  if (type == "Replace") {
    ASSIGN_OR_RETURN(auto p, PatternMatcher::FromJson(j["pattern"]));
    return std::unique_ptr<Decoder>(
        new ReplaceDecoder(std::move(p), std::string(JStr(j, "content").value_or(""))));
  }
  if (type == "ByteFallback") return std::unique_ptr<Decoder>(new ByteFallbackDecoder());
  if (type == "Fuse") return std::unique_ptr<Decoder>(new FuseDecoder());
  if (type == "Strip") {
    auto c = ToCodePoints(JStr(j, "content").value_or(" "));
    return std::unique_ptr<Decoder>(
        new StripDecoder(c.empty() ? U' ' : c[0], static_cast<size_t>(JInt(j, "start").value_or(0)),
                         static_cast<size_t>(JInt(j, "stop").value_or(0))));
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Decoder>> v;
    simdjson::dom::array arr;
    if (j["decoders"].get(arr) != simdjson::SUCCESS)
      return InvalidArgument("Sequence decoder without decoders");
    for (auto e : arr) {
      ASSIGN_OR_RETURN(auto d, MakeDecoder(e));
      v.push_back(std::move(d));
    }
    return std::unique_ptr<Decoder>(new SequenceDecoder(std::move(v)));
  }
  return Unsupported("decoder type '" + type + "'");
}

}  // namespace sluice::tok
