// Model repository: where the served names and their versions come from, and what each
// name's model.json asks for (docs/model-ops.md).
//
//   DIR/<name>/<version>/      a model directory as `--model` takes (config.json, ...);
//                              <version> is a positive integer
//   DIR/<name>/model.json      optional: version policy, default version, task, dtype,
//                              device, limits, plugins
//   DIR/<name>/config.json     instead of versions: DIR/<name> is one model directory,
//                              served as version 1
//
// `--model NAME=PATH` adds a name outside the repository: PATH is a model directory
// (served as version 1) or a directory in the layout of DIR/<name>/ above.
//
// Names and versions are checked before any path is built from them: a name is
// [A-Za-z0-9][A-Za-z0-9_.-]* (at most 128 characters, no ".."), a version digits only;
// a version directory whose real path (symlinks resolved) leaves its name's directory is
// refused. Const after construction; safe from any thread.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/status.h"

namespace sluice::serving {

// Triton's version policies: the newest N versions, all of them, or the ones listed.
struct VersionPolicy {
  enum class Kind { kLatest, kAll, kSpecific };
  Kind kind = Kind::kLatest;
  int64_t latest = 1;
  std::vector<int64_t> versions;  // kSpecific
  bool operator==(const VersionPolicy&) const = default;
};

// model.json (or the config override of a load request). Unset fields fall back to the
// server's flags.
struct ModelConfig {
  VersionPolicy policy;
  std::optional<int64_t> default_version;
  std::optional<std::string> task, dtype, device;
  std::optional<int64_t> max_batch_tokens, max_num_seqs, max_queue_depth;
  std::optional<int64_t> max_inputs_per_request, max_tokens_per_input;
  std::optional<bool> truncate;
  // "sources": {"3": "https://.../v3.tar.zst#sha256=..."}: versions materialised through the
  // model cache (serving/model_cache.h) when they load, beside the version directories.
  std::map<int64_t, std::string> sources;
  // "plugins": ["lib/rules.so"]: plugin libraries (docs/plugins.md) every version of the name
  // loads, before its sluice.json "plugins". As parsed: the paths written; through
  // Repository::Config: canonical paths, each a file inside the repository.
  std::vector<std::string> plugins;
  bool operator==(const ModelConfig&) const = default;
};

// Parses model.json's fields over `base` (fields present replace base's). Unknown fields
// and wrong types are InvalidArgument naming the field, prefixed by `where`. Without
// `allow_plugins` (a load request's override) "plugins" is refused: only the repository's
// own files name libraries to load.
StatusOr<ModelConfig> ParseModelConfig(std::string_view json, const std::string& where,
                                       ModelConfig base = {}, bool allow_plugins = true);
std::string DescribePolicy(const VersionPolicy& p);

Status ValidateName(std::string_view name);
// "3" -> 3; anything but 1..2^53 written in digits (no sign, no leading zero) is refused.
StatusOr<int64_t> ParseVersion(std::string_view text);
// "name" or "name:version" (the `model` field of a request).
Status SplitModelRef(std::string_view ref, std::string* name, std::optional<int64_t>* version);

// The versions the policy serves among `available` (ascending), newest last. With
// `pinned` (an explicit default, POST .../default), `latest N` keeps the pinned version and
// the newest N-1 others; `all` and `specific` add it. Errors name missing versions.
StatusOr<std::vector<int64_t>> SelectVersions(const VersionPolicy& policy,
                                              const std::vector<int64_t>& available,
                                              std::optional<int64_t> pinned = std::nullopt);

struct VersionDir {
  int64_t version = 0;
  std::string path;     // a directory, or a cache source (model.json "sources")
  bool source = false;  // path is a cache source, pulled when the version loads
};

class Repository {
 public:
  // `root`: the repository (may be empty); `extra`: NAME=PATH entries.
  static StatusOr<Repository> Open(const std::string& root,
                                   const std::vector<std::pair<std::string, std::string>>& extra);

  const std::string& root() const { return root_; }
  // Every name: the repository's directories (scanned now) and the extra entries.
  std::vector<std::string> Names() const;
  bool Has(std::string_view name) const;
  // The name's versions on disk, ascending. NotFound for an unknown name.
  StatusOr<std::vector<VersionDir>> Versions(std::string_view name) const;
  // The name's model.json (defaults when there is none), its "plugins" resolved: a relative
  // path against the name's directory; each must be a file whose real path (symlinks
  // resolved) lies inside the repository (for a --model NAME=PATH entry: inside PATH),
  // else InvalidArgument "NAME/model.json: plugins[i]: ...".
  StatusOr<ModelConfig> Config(std::string_view name) const;

 private:
  struct Extra {
    std::string name, path;
    bool single = false;  // PATH is one model directory (version 1)
    bool extra = false;   // a --model NAME=PATH entry (else a directory of the repository)
  };
  // The directory holding the name's versions (and model.json), or the single model dir.
  StatusOr<Extra> Locate(std::string_view name) const;

  std::string root_;  // canonical
  std::vector<Extra> extra_;
};

}  // namespace sluice::serving
