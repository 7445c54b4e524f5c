#include "engine/plugins.h"

#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <cstddef>
#include <cstring>
#include <filesystem>

#include "core/log.h"

#ifndef SLUICE_VERSION
#define SLUICE_VERSION "0"
#endif

namespace sluice {
namespace {

std::string Message(const sluice_plugin_error& e) {
  std::string m(e.message, strnlen(e.message, sizeof e.message));
  return m.empty() ? "(no message)" : m;
}

// A plugin processor instance behind the engine's interface.
class PluginProcessor final : public LogitsProcessor {
 public:
  PluginProcessor(const sluice_logits_processor& desc, std::string name, void* instance)
      : desc_(desc), name_(std::move(name)), instance_(instance) {}
  ~PluginProcessor() override {
    if (desc_.destroy != nullptr) desc_.destroy(instance_);
  }
  const std::string& name() const override { return name_; }
  bool argmax_invariant() const override { return desc_.flags & SLUICE_LP_ARGMAX_INVARIANT; }

  void UpdateState(const LpUpdate& u) override {
    added_.clear();
    for (const LpAddedRow& a : u.added) added_.push_back(a.c);
    sluice_batch_update c{};
    c.struct_size = sizeof c;
    c.batch_size = u.batch_size;
    c.removed = u.removed.data();
    c.num_removed = static_cast<int32_t>(u.removed.size());
    c.added = added_.data();
    c.num_added = static_cast<int32_t>(added_.size());
    c.moved = u.moved.data();
    c.num_moved = static_cast<int32_t>(u.moved.size());
    c.partial_prefill = u.partial.data();
    c.num_partial_prefill = static_cast<int32_t>(u.partial.size());
    desc_.update_state(instance_, &c);
  }

  Status FillMask(int32_t row, uint32_t* mask) override {
    sluice_plugin_error err{};
    if (desc_.fill_bitmask(instance_, row, mask, &err) != 0) {
      return Internal("logits processor " + name_ + ": " + Message(err));
    }
    return Status::Ok();
  }

  bool has_allowed() const override { return desc_.fill_allowed != nullptr; }
  Status FillAllowed(int32_t row, int32_t* ids, int32_t capacity, int32_t* count) override {
    sluice_plugin_error err{};
    *count = -1;
    if (desc_.fill_allowed(instance_, row, ids, capacity, count, &err) != 0) {
      return Internal("logits processor " + name_ + ": " + Message(err));
    }
    return Status::Ok();
  }

 private:
  sluice_logits_processor desc_;
  std::string name_;
  void* instance_;
  std::vector<sluice_added_row> added_;
};

struct HostContext {
  PluginSet* set;
  std::string path;
};

int HostRegister(void* context, const sluice_logits_processor* p, sluice_plugin_error* err) {
  auto* h = static_cast<HostContext*>(context);
  if (p == nullptr) return sluice_plugin_fail(err, "register_logits_processor: NULL processor");
  // A plugin of an older minor version passes a shorter struct: only struct_size bytes are
  // its (the fields past them stay NULL).
  sluice_logits_processor d{};
  std::memcpy(&d, p, std::min<size_t>(p->struct_size, sizeof d));
  Status st = h->set->Register(d, h->path);
  if (!st.ok()) return sluice_plugin_fail(err, "%s", st.message().c_str());
  return 0;
}

int HostRegisterIo(void* context, const sluice_io_processor* p, sluice_plugin_error* err) {
  auto* h = static_cast<HostContext*>(context);
  if (p == nullptr) return sluice_plugin_fail(err, "register_io_processor: NULL processor");
  Status st = h->set->RegisterIo(*p, h->path);
  if (!st.ok()) return sluice_plugin_fail(err, "%s", st.message().c_str());
  return 0;
}

// Letters, digits, '_', '-' and '.' (names go into request fields and URL paths).
Status CheckName(const char* name, const char* what) {
  if (name == nullptr || name[0] == '\0') {
    return InvalidArgument(std::string("a ") + what + " needs a name");
  }
  for (const char* c = name; *c != '\0'; ++c) {
    const unsigned char ch = static_cast<unsigned char>(*c);
    if (!(std::isalnum(ch) || ch == '_' || ch == '-' || ch == '.')) {
      return InvalidArgument(std::string(what) + " name \"" + name +
                             "\": only letters, digits, '_', '-' and '.'");
    }
  }
  return Status::Ok();
}

void HostLog(void* context, int level, const char* message) {
  auto* h = static_cast<HostContext*>(context);
  const char* m = message != nullptr ? message : "";
  if (level >= 2) {
    SLUICE_LOG_ERROR("plugin {}: {}", h->path, m);
  } else if (level == 1) {
    SLUICE_LOG_WARN("plugin {}: {}", h->path, m);
  } else {
    SLUICE_LOG_INFO("plugin {}: {}", h->path, m);
  }
}

}  // namespace

LogitsProcessorFactory::LogitsProcessorFactory(const sluice_logits_processor& desc,
                                               std::string origin)
    : desc_(desc), name_(desc.name), origin_(std::move(origin)) {
  desc_.name = name_.c_str();
  if (!SLUICE_STRUCT_HAS(&desc_, sluice_logits_processor, fill_allowed)) {
    desc_.fill_allowed = nullptr;  // minor 0 to 2
  }
}

Status LogitsProcessorFactory::Validate(const sluice_request_params& params) const {
  if (desc_.validate == nullptr) return Status::Ok();
  sluice_plugin_error err{};
  if (desc_.validate(desc_.user_data, &params, &err) != 0) {
    return InvalidArgument("logits_processors: " + name_ + ": " + Message(err));
  }
  return Status::Ok();
}

StatusOr<std::unique_ptr<LogitsProcessor>> LogitsProcessorFactory::Create(int vocab_size,
                                                                          int max_rows) const {
  sluice_processor_config cfg{};
  cfg.struct_size = sizeof cfg;
  cfg.vocab_size = vocab_size;
  cfg.max_rows = max_rows;
  sluice_plugin_error err{};
  void* instance = desc_.create(desc_.user_data, &cfg, &err);
  if (instance == nullptr) {
    return FailedPrecondition("plugin " + origin_ + ": logits processor " + name_ +
                              ": create failed: " + Message(err));
  }
  return std::unique_ptr<LogitsProcessor>(new PluginProcessor(desc_, name_, instance));
}

PluginSet::~PluginSet() {
  processors_.clear();
  for (void* h : handles_) dlclose(h);
}

Status PluginSet::Register(const sluice_logits_processor& desc, const std::string& origin) {
  // Fields up to fill_bitmask are required (a smaller struct is from no ABI we know); later
  // ones (fill_allowed, minor 3) are read only when struct_size covers them.
  constexpr size_t kMinSize = offsetof(sluice_logits_processor, fill_allowed);
  if (desc.struct_size < kMinSize) {
    return InvalidArgument("logits processor struct_size " + std::to_string(desc.struct_size) +
                           " is smaller than ABI 1.0's " + std::to_string(kMinSize));
  }
  RETURN_IF_ERROR(CheckName(desc.name, "logits processor"));
  const std::string name = desc.name;
  if (desc.create == nullptr || desc.update_state == nullptr || desc.fill_bitmask == nullptr) {
    return InvalidArgument("logits processor " + name +
                           ": create, update_state and fill_bitmask are required");
  }
  if (name == kStructuredProcessorName) {
    return InvalidArgument("logits processor name \"" + name + "\" is reserved");
  }
  if (const LogitsProcessorFactory* f = Find(name)) {
    return InvalidArgument("logits processor " + name + " is already registered by " + f->origin());
  }
  processors_.push_back(std::make_unique<LogitsProcessorFactory>(desc, origin));
  return Status::Ok();
}

const char* IoTaskName(uint32_t task) {
  switch (task) {
    case SLUICE_TASK_EMBED:
      return "embed";
    case SLUICE_TASK_CLASSIFY:
      return "classify";
    case SLUICE_TASK_SCORE:
      return "score";
    case SLUICE_TASK_TOKEN_CLASSIFY:
      return "token-classify";
    case SLUICE_TASK_CLIP:
      return "clip";
    default:
      return nullptr;
  }
}

Status PluginSet::RegisterIo(const sluice_io_processor& desc, const std::string& origin) {
  if (desc.struct_size < sizeof(sluice_io_processor)) {
    return InvalidArgument("IO processor struct_size " + std::to_string(desc.struct_size) +
                           " is smaller than this ABI's " +
                           std::to_string(sizeof(sluice_io_processor)));
  }
  RETURN_IF_ERROR(CheckName(desc.name, "IO processor"));
  const std::string name = desc.name;
  if (IoTaskName(desc.task) == nullptr) {
    return InvalidArgument(
        "IO processor " + name + ": task " + std::to_string(desc.task) +
        " is none of SLUICE_TASK_EMBED, _CLASSIFY, _SCORE, _TOKEN_CLASSIFY, _CLIP");
  }
  if (desc.parse == nullptr || desc.respond == nullptr) {
    return InvalidArgument("IO processor " + name + ": parse and respond are required");
  }
  if (const IoProcessorEntry* e = FindIo(name)) {
    return InvalidArgument("IO processor " + name + " is already registered by " + e->origin);
  }
  auto e = std::make_unique<IoProcessorEntry>();
  e->desc = desc;
  e->name = name;
  e->origin = origin;
  e->desc.name = e->name.c_str();
  io_processors_.push_back(std::move(e));
  return Status::Ok();
}

const IoProcessorEntry* PluginSet::FindIo(const std::string& name) const {
  for (const auto& e : io_processors_) {
    if (e->name == name) return e.get();
  }
  return nullptr;
}

std::string PluginSet::IoNames() const {
  std::string s;
  for (const auto& e : io_processors_) s += (s.empty() ? "" : ", ") + e->name;
  return s.empty() ? "none" : s;
}

Status PluginSet::LoadLibrary(const std::string& path) {
  auto fail = [&](const std::string& why) {
    return FailedPrecondition("plugin " + path + ": " + why);
  };
  std::error_code ec;
  const std::filesystem::path canon = std::filesystem::canonical(path, ec);
  if (ec) return fail("cannot open: " + ec.message());
  for (const std::string& p : paths_) {
    if (p == canon.string()) return Status::Ok();
  }
  void* h = dlopen(canon.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    const char* e = dlerror();
    return fail(std::string("dlopen failed: ") + (e != nullptr ? e : "unknown error"));
  }
  auto close = [&](Status st) {
    dlclose(h);
    return st;
  };
  auto version =
      reinterpret_cast<sluice_plugin_abi_version_fn>(dlsym(h, "sluice_plugin_abi_version"));
  if (version == nullptr) {
    return close(fail("missing symbol sluice_plugin_abi_version (not a sluice plugin?)"));
  }
  const uint32_t v = version();
  if (v != SLUICE_PLUGIN_ABI_VERSION) {
    return close(fail("plugin ABI version " + std::to_string(v) + ", this sluice has ABI version " +
                      std::to_string(SLUICE_PLUGIN_ABI_VERSION) +
                      "; rebuild the plugin against this sluice's include/sluice/plugin.h"));
  }
  auto minor_fn = reinterpret_cast<sluice_plugin_abi_minor_fn>(dlsym(h, "sluice_plugin_abi_minor"));
  const uint32_t plugin_minor = minor_fn != nullptr ? minor_fn() : 0;
  if (plugin_minor > SLUICE_PLUGIN_ABI_MINOR) {
    return close(fail("plugin needs ABI " + std::to_string(v) + "." + std::to_string(plugin_minor) +
                      ", this sluice has ABI " + std::to_string(SLUICE_PLUGIN_ABI_VERSION) + "." +
                      std::to_string(SLUICE_PLUGIN_ABI_MINOR) +
                      " (a newer sluice is needed, or a plugin built against this one's "
                      "header)"));
  }
  auto init = reinterpret_cast<sluice_plugin_init_fn>(dlsym(h, "sluice_plugin_init"));
  if (init == nullptr) return close(fail("missing symbol sluice_plugin_init"));
  HostContext ctx{this, canon.string()};
  sluice_plugin_host host{};
  host.struct_size = sizeof host;
  host.abi_version = SLUICE_PLUGIN_ABI_VERSION;
  host.sluice_version = SLUICE_VERSION;
  host.plugin_path = ctx.path.c_str();
  host.context = &ctx;
  host.register_logits_processor = HostRegister;
  host.log = HostLog;
  host.abi_minor = SLUICE_PLUGIN_ABI_MINOR;
  host.register_io_processor = HostRegisterIo;
  const size_t before = processors_.size(), io_before = io_processors_.size();
  sluice_plugin_error err{};
  if (init(&host, &err) != 0) {
    processors_.resize(before);  // what it registered before failing goes too
    io_processors_.resize(io_before);
    return close(fail("sluice_plugin_init failed: " + Message(err)));
  }
  handles_.push_back(h);
  paths_.push_back(canon.string());
  std::string names;
  for (size_t i = before; i < processors_.size(); ++i) {
    names += (names.empty() ? "" : ", ") + processors_[i]->name();
  }
  std::string io_names;
  for (size_t i = io_before; i < io_processors_.size(); ++i) {
    io_names += (io_names.empty() ? "" : ", ") + io_processors_[i]->name;
  }
  SLUICE_LOG_INFO("plugin {} (ABI {}.{}): logits processors: {}; IO processors: {}", canon.string(),
                  v, plugin_minor, names.empty() ? "none" : names,
                  io_names.empty() ? "none" : io_names);
  return Status::Ok();
}

const LogitsProcessorFactory* PluginSet::Find(const std::string& name) const {
  for (const auto& f : processors_) {
    if (f->name() == name) return f.get();
  }
  return nullptr;
}

std::string PluginSet::Names() const {
  std::string s;
  for (const auto& f : processors_) s += (s.empty() ? "" : ", ") + f->name();
  return s.empty() ? "none" : s;
}

StatusOr<std::shared_ptr<PluginSet>> LoadPlugins(const std::vector<std::string>& paths) {
  auto set = std::make_shared<PluginSet>();
  for (const std::string& p : paths) RETURN_IF_ERROR(set->LoadLibrary(p));
  return set;
}

}  // namespace sluice
