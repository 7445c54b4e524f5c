#include "serving/repository.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "core/log.h"
#include "io/json.h"
#include "serving/model_cache.h"

namespace sluice::serving {
namespace fs = std::filesystem;
namespace {

constexpr int64_t kMaxVersion = int64_t{1} << 53;

Status IntField(io::Fields& f, const char* name, int64_t min, std::optional<int64_t>* out) {
  simdjson::dom::element e;
  if (!f.Get(name, &e)) return Status::Ok();
  int64_t v = 0;
  if (e.get(v) || v < min) {
    return io::FieldError(f.Path(name), "must be an integer >= " + std::to_string(min));
  }
  *out = v;
  return Status::Ok();
}

Status StringField(io::Fields& f, const char* name, std::optional<std::string>* out) {
  simdjson::dom::element e;
  if (!f.Get(name, &e)) return Status::Ok();
  std::string s;
  RETURN_IF_ERROR(f.GetString(name, &s));
  *out = s;
  return Status::Ok();
}

// A version given as 3 or "3".
StatusOr<int64_t> VersionValue(simdjson::dom::element e, const std::string& path) {
  int64_t v = 0;
  if (!e.get(v)) {
    if (v < 1 || v > kMaxVersion) return io::FieldError(path, "must be a positive version");
    return v;
  }
  std::string_view s;
  if (!e.get(s)) {
    auto p = ParseVersion(s);
    if (!p.ok()) return io::FieldError(path, p.status().message());
    return *p;
  }
  return io::FieldError(path, "must be a version (a positive integer)");
}

Status ParsePolicy(simdjson::dom::element e, const std::string& path, VersionPolicy* out) {
  simdjson::dom::object obj;
  if (e.get(obj)) return io::FieldError(path, "must be an object: latest, all or specific");
  io::Fields f(obj, path);
  int kinds = 0;
  simdjson::dom::element v;
  VersionPolicy p;
  if (f.Get("latest", &v)) {
    ++kinds;
    p.kind = VersionPolicy::Kind::kLatest;
    simdjson::dom::object lo;
    if (v.get(lo)) return io::FieldError(path + ".latest", "must be {\"num_versions\": N}");
    io::Fields lf(lo, path + ".latest");
    std::optional<int64_t> n;
    RETURN_IF_ERROR(IntField(lf, "num_versions", 1, &n));
    RETURN_IF_ERROR(lf.CheckNoUnknown());
    if (!n) return io::FieldError(path + ".latest.num_versions", "is required");
    p.latest = *n;
  }
  if (f.Get("all", &v)) {
    ++kinds;
    p.kind = VersionPolicy::Kind::kAll;
    simdjson::dom::object ao;
    if (v.get(ao) || ao.size() != 0) return io::FieldError(path + ".all", "must be {}");
  }
  if (f.Get("specific", &v)) {
    ++kinds;
    p.kind = VersionPolicy::Kind::kSpecific;
    simdjson::dom::object so;
    if (v.get(so)) return io::FieldError(path + ".specific", "must be {\"versions\": [...]}");
    io::Fields sf(so, path + ".specific");
    simdjson::dom::element ve;
    simdjson::dom::array a;
    if (!sf.Get("versions", &ve) || ve.get(a) || a.size() == 0) {
      return io::FieldError(path + ".specific.versions", "must be a non-empty list of versions");
    }
    size_t i = 0;
    for (auto x : a) {
      ASSIGN_OR_RETURN(int64_t ver,
                       VersionValue(x, path + ".specific.versions[" + std::to_string(i++) + "]"));
      p.versions.push_back(ver);
    }
    std::sort(p.versions.begin(), p.versions.end());
    p.versions.erase(std::unique(p.versions.begin(), p.versions.end()), p.versions.end());
    RETURN_IF_ERROR(sf.CheckNoUnknown());
  }
  RETURN_IF_ERROR(f.CheckNoUnknown());
  if (kinds != 1) return io::FieldError(path, "must hold exactly one of latest, all, specific");
  *out = std::move(p);
  return Status::Ok();
}

bool CanonicalUnder(const fs::path& p, const fs::path& root, std::string* real) {
  std::error_code ec;
  const fs::path c = fs::canonical(p, ec);
  if (ec) return false;
  const std::string cs = c.string(), rs = root.string();
  if (cs.size() <= rs.size() || cs.compare(0, rs.size(), rs) != 0 || cs[rs.size()] != '/') {
    return false;
  }
  *real = cs;
  return true;
}

}  // namespace

StatusOr<ModelConfig> ParseModelConfig(std::string_view json, const std::string& where,
                                       ModelConfig base, bool allow_plugins) {
  auto obj = io::ParseObject(json);
  if (!obj.ok()) return obj.status().WithContext(where);
  io::Fields f(*obj, "");
  ModelConfig c = std::move(base);
  auto ctx = [&](Status s) { return s.WithContext(where); };
  simdjson::dom::element e;
  if (f.Get("version_policy", &e)) {
    if (Status s = ParsePolicy(e, "version_policy", &c.policy); !s.ok()) return ctx(s);
  }
  if (f.Get("default_version", &e)) {
    auto v = VersionValue(e, "default_version");
    if (!v.ok()) return ctx(v.status());
    c.default_version = *v;
  }
  for (auto [name, field] :
       {std::pair{"task", &c.task}, std::pair{"dtype", &c.dtype}, std::pair{"device", &c.device}}) {
    if (Status s = StringField(f, name, field); !s.ok()) return ctx(s);
  }
  for (auto [name, field, min] :
       {std::tuple{"max_batch_tokens", &c.max_batch_tokens, 1},
        std::tuple{"max_num_seqs", &c.max_num_seqs, 1},
        std::tuple{"max_queue_depth", &c.max_queue_depth, 1},
        std::tuple{"max_inputs_per_request", &c.max_inputs_per_request, 1},
        std::tuple{"max_tokens_per_input", &c.max_tokens_per_input, 0}}) {
    if (Status s = IntField(f, name, min, field); !s.ok()) return ctx(s);
  }
  if (f.Get("truncate", &e)) {
    bool t = false;
    if (Status s = f.GetBool("truncate", &t); !s.ok()) return ctx(s);
    c.truncate = t;
  }
  if (f.Get("sources", &e)) {
    simdjson::dom::object so;
    if (e.get(so)) {
      return ctx(io::FieldError("sources", "must be an object of version -> source"));
    }
    c.sources.clear();
    for (auto [key, val] : so) {
      const std::string at = "sources." + std::string(key);
      auto v = ParseVersion(key);
      if (!v.ok()) return ctx(io::FieldError(at, v.status().message()));
      std::string_view src;
      if (val.get(src) || !IsCacheSource(src)) {
        return ctx(io::FieldError(
            at,
            "must be a string naming an archive (.tar, .tar.gz, .tar.zst) or an http(s):// "
            "or file:// URL of one, optionally with #sha256=HEX"));
      }
      c.sources[*v] = std::string(src);
    }
  }
  if (f.Get("plugins", &e)) {
    if (!allow_plugins) {
      return ctx(
          io::FieldError("plugins",
                         "may be set only in the model's model.json (a load request cannot name "
                         "libraries to load)"));
    }
    simdjson::dom::array pa;
    if (e.get(pa)) return ctx(io::FieldError("plugins", "must be a list of shared-library paths"));
    c.plugins.clear();
    size_t i = 0;
    for (auto x : pa) {
      std::string_view path;
      if (x.get(path) || path.empty() || path.find('\0') != std::string_view::npos) {
        return ctx(io::FieldError("plugins[" + std::to_string(i) + "]",
                                  "must be a non-empty string (a shared-library path)"));
      }
      c.plugins.emplace_back(path);
      ++i;
    }
  }
  if (Status s = f.CheckNoUnknown(); !s.ok()) return ctx(s);
  return c;
}

std::string DescribePolicy(const VersionPolicy& p) {
  switch (p.kind) {
    case VersionPolicy::Kind::kLatest:
      return "latest " + std::to_string(p.latest);
    case VersionPolicy::Kind::kAll:
      return "all";
    case VersionPolicy::Kind::kSpecific: {
      std::string s = "specific [";
      for (size_t i = 0; i < p.versions.size(); ++i) {
        s += (i ? ", " : "") + std::to_string(p.versions[i]);
      }
      return s + "]";
    }
  }
  return "?";
}

Status ValidateName(std::string_view name) {
  auto bad = [&](const std::string& why) {
    std::string shown(name.substr(0, 64));
    return InvalidArgument("model name \"" + shown + "\" " + why);
  };
  if (name.empty()) return InvalidArgument("model name is empty");
  if (name.size() > 128) return bad("is longer than 128 characters");
  if (name.find("..") != std::string_view::npos) return bad("contains \"..\"");
  const auto ok = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-' || c == '.';
  };
  if (!ok(name[0]) || name[0] == '.' || name[0] == '-' || name[0] == '_') {
    return bad("must start with a letter or digit");
  }
  for (char c : name) {
    if (!ok(c)) return bad("may hold only letters, digits, '_', '-' and '.'");
  }
  return Status::Ok();
}

StatusOr<int64_t> ParseVersion(std::string_view text) {
  auto bad = [&] {
    return InvalidArgument("version \"" + std::string(text.substr(0, 32)) +
                           "\" is not a positive integer");
  };
  if (text.empty() || text.size() > 16 || text[0] == '0') return bad();
  int64_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return bad();
    v = v * 10 + (c - '0');
  }
  if (v > kMaxVersion) return bad();
  return v;
}

Status SplitModelRef(std::string_view ref, std::string* name, std::optional<int64_t>* version) {
  const size_t colon = ref.rfind(':');
  *version = std::nullopt;
  if (colon == std::string_view::npos) {
    *name = std::string(ref);
    return Status::Ok();
  }
  *name = std::string(ref.substr(0, colon));
  ASSIGN_OR_RETURN(int64_t v, ParseVersion(ref.substr(colon + 1)));
  *version = v;
  return Status::Ok();
}

StatusOr<std::vector<int64_t>> SelectVersions(const VersionPolicy& policy,
                                              const std::vector<int64_t>& available,
                                              std::optional<int64_t> pinned) {
  auto has = [&](int64_t v) {
    return std::find(available.begin(), available.end(), v) != available.end();
  };
  if (pinned && !has(*pinned)) {
    return NotFound("version " + std::to_string(*pinned) + " is not in the repository");
  }
  std::set<int64_t> out;
  switch (policy.kind) {
    case VersionPolicy::Kind::kLatest: {
      int64_t room = policy.latest - (pinned ? 1 : 0);
      if (pinned) out.insert(*pinned);
      for (auto it = available.rbegin(); it != available.rend() && room > 0; ++it) {
        if (pinned && *it == *pinned) continue;
        out.insert(*it);
        --room;
      }
      break;
    }
    case VersionPolicy::Kind::kAll:
      out.insert(available.begin(), available.end());
      break;
    case VersionPolicy::Kind::kSpecific:
      for (int64_t v : policy.versions) {
        if (!has(v)) {
          return NotFound("version " + std::to_string(v) +
                          " of the version policy (specific) is not in the repository");
        }
        out.insert(v);
      }
      if (pinned) out.insert(*pinned);
      break;
  }
  if (out.empty()) return NotFound("no version in the repository");
  return std::vector<int64_t>(out.begin(), out.end());
}

StatusOr<Repository> Repository::Open(
    const std::string& root, const std::vector<std::pair<std::string, std::string>>& extra) {
  Repository r;
  std::error_code ec;
  if (!root.empty()) {
    const fs::path c = fs::canonical(root, ec);
    if (ec || !fs::is_directory(c)) {
      return NotFound("--model-repository " + root + ": not a directory");
    }
    r.root_ = c.string();
  }
  for (const auto& [name, path] : extra) {
    RETURN_IF_ERROR(ValidateName(name).WithContext("--model " + name + "=" + path));
    for (const Extra& e : r.extra_) {
      if (e.name == name)
        return InvalidArgument("--model: the name \"" + name + "\" is given twice");
    }
    if (!r.root_.empty() && fs::is_directory(fs::path(r.root_) / name)) {
      return InvalidArgument("--model " + name + ": the repository has a model of that name too");
    }
    const fs::path c = fs::canonical(path, ec);
    if (ec) return NotFound("model directory " + path + " does not exist");
    if (!fs::is_directory(c)) return NotFound("model directory " + path + " is not a directory");
    Extra e{name, c.string(), fs::exists(c / "config.json"), /*extra=*/true};
    r.extra_.push_back(std::move(e));
  }
  return r;
}

std::vector<std::string> Repository::Names() const {
  std::set<std::string> names;
  if (!root_.empty()) {
    std::error_code ec;
    for (const auto& d : fs::directory_iterator(root_, ec)) {
      const std::string n = d.path().filename().string();
      if (d.is_directory() && ValidateName(n).ok()) names.insert(n);
    }
  }
  for (const Extra& e : extra_) names.insert(e.name);
  return std::vector<std::string>(names.begin(), names.end());
}

bool Repository::Has(std::string_view name) const { return Locate(name).ok(); }

StatusOr<Repository::Extra> Repository::Locate(std::string_view name) const {
  RETURN_IF_ERROR(ValidateName(name));
  for (const Extra& e : extra_) {
    if (e.name == name) return e;
  }
  if (!root_.empty()) {
    const fs::path p = fs::path(root_) / std::string(name);
    std::error_code ec;
    if (fs::exists(fs::symlink_status(p, ec))) {
      std::string real;
      if (!CanonicalUnder(p, root_, &real) || !fs::is_directory(real)) {
        return InvalidArgument("model \"" + std::string(name) +
                               "\": its directory is a link out of the repository");
      }
      // A model directory itself (config.json, no versions): served as version 1.
      return Extra{std::string(name), real, fs::exists(fs::path(real) / "config.json")};
    }
  }
  return NotFound("model \"" + std::string(name) + "\" is not in the repository");
}

StatusOr<std::vector<VersionDir>> Repository::Versions(std::string_view name) const {
  ASSIGN_OR_RETURN(Extra e, Locate(name));
  if (e.single) return std::vector<VersionDir>{VersionDir{1, e.path}};
  std::vector<VersionDir> out;
  std::error_code ec;
  for (const auto& d : fs::directory_iterator(e.path, ec)) {
    const std::string n = d.path().filename().string();
    auto v = ParseVersion(n);
    if (!v.ok()) continue;  // model.json, README, ...
    std::string real;
    if (!CanonicalUnder(d.path(), e.path, &real) || !fs::is_directory(real)) {
      // A link out of the name's directory (or to a file) is not a version.
      SLUICE_LOG_WARN("model \"{}\": version {} ignored: {} is not a directory inside {}", name, n,
                      d.path().string(), e.path);
      continue;
    }
    out.push_back(VersionDir{*v, real});
  }
  if (ec) return NotFound("cannot list " + e.path + ": " + ec.message());
  std::sort(out.begin(), out.end(),
            [](const VersionDir& a, const VersionDir& b) { return a.version < b.version; });
  return out;
}

StatusOr<ModelConfig> Repository::Config(std::string_view name) const {
  ASSIGN_OR_RETURN(Extra e, Locate(name));
  if (e.single) return ModelConfig{};
  const fs::path p = fs::path(e.path) / "model.json";
  if (!fs::exists(p)) return ModelConfig{};
  std::ifstream in(p, std::ios::binary);
  if (!in) return NotFound("cannot read " + p.string());
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string where = std::string(name) + "/model.json";
  ASSIGN_OR_RETURN(ModelConfig c, ParseModelConfig(ss.str(), where));
  // Plugins: relative to the name's directory, and inside the repository (an extra entry's
  // directory is its own repository), symlinks resolved.
  const fs::path bound = e.extra ? fs::path(e.path) : fs::path(root_);
  for (size_t i = 0; i < c.plugins.size(); ++i) {
    const std::string at = "plugins[" + std::to_string(i) + "]";
    const fs::path written = c.plugins[i];
    const fs::path full = written.is_absolute() ? written : fs::path(e.path) / written;
    std::error_code ec;
    if (!fs::exists(full, ec)) {
      return io::FieldError(at, "is " + c.plugins[i] + ": no such file (" + full.string() + ")")
          .WithContext(where);
    }
    std::string real;
    if (!CanonicalUnder(full, bound, &real)) {
      return io::FieldError(at, "is " + c.plugins[i] + ", which leaves the repository " +
                                    bound.string() + " (plugins must lie inside it)")
          .WithContext(where);
    }
    if (!fs::is_regular_file(real, ec)) {
      return io::FieldError(at, "is " + c.plugins[i] + ": not a file (" + real + ")")
          .WithContext(where);
    }
    c.plugins[i] = real;
  }
  return c;
}

}  // namespace sluice::serving
