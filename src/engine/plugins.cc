#include "engine/plugins.h"

#include <dlfcn.h>

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
  Status st = h->set->Register(*p, h->path);
  if (!st.ok()) return sluice_plugin_fail(err, "%s", st.message().c_str());
  return 0;
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
  // Fields up to fill_bitmask are required (a smaller struct is from no ABI we know).
  if (desc.struct_size < sizeof(sluice_logits_processor)) {
    return InvalidArgument("logits processor struct_size " + std::to_string(desc.struct_size) +
                           " is smaller than this ABI's " +
                           std::to_string(sizeof(sluice_logits_processor)));
  }
  if (desc.name == nullptr || desc.name[0] == '\0') {
    return InvalidArgument("a logits processor needs a name");
  }
  const std::string name = desc.name;
  for (char ch : name) {
    if (!(std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '-' || ch == '.')) {
      return InvalidArgument("logits processor name \"" + name +
                             "\": only letters, digits, '_', '-' and '.'");
    }
  }
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
  const size_t before = processors_.size();
  sluice_plugin_error err{};
  if (init(&host, &err) != 0) {
    processors_.resize(before);  // what it registered before failing goes too
    return close(fail("sluice_plugin_init failed: " + Message(err)));
  }
  handles_.push_back(h);
  paths_.push_back(canon.string());
  std::string names;
  for (size_t i = before; i < processors_.size(); ++i) {
    names += (names.empty() ? "" : ", ") + processors_[i]->name();
  }
  SLUICE_LOG_INFO("plugin {}: logits processors: {}", canon.string(),
                  names.empty() ? "none" : names);
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
