#include "server/model_registry.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <set>
#include <thread>

#include "core/log.h"

namespace sluice::server {
namespace {

const std::vector<double> kLoadBounds = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
                                         2.5,  5,     10,   30,  60,   120, 300};

double Since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string Quote(const std::string& s) { return "\"" + s + "\""; }

}  // namespace

ModelRegistry::Lease& ModelRegistry::Lease::operator=(Lease&& o) noexcept {
  if (this != &o) {
    Release();
    slot_ = std::move(o.slot_);
  }
  return *this;
}

void ModelRegistry::Lease::Release() {
  if (!slot_) return;
  {
    std::lock_guard<std::mutex> lock(slot_->mu);
    if (--slot_->active == 0) slot_->cv.notify_all();
  }
  slot_.reset();
}

ModelRegistry::ModelRegistry(const serving::Repository* repo, ModelFactory factory,
                             RegistryOptions options)
    : repo_(repo),
      factory_(std::move(factory)),
      options_(options),
      table_(std::make_shared<const Table>()) {}

ModelRegistry::~ModelRegistry() { UnloadAll(); }

std::shared_ptr<const ModelRegistry::Table> ModelRegistry::table() const {
  std::lock_guard<std::mutex> lock(table_mu_);
  return table_;
}

std::string ModelRegistry::Describe(const Table& t) {
  if (t.empty()) return "no models";
  std::string out;
  for (const auto& [name, v] : t) {
    if (!out.empty()) out += ", ";
    out += Quote(name) + " (version" + (v.versions.size() > 1 ? "s " : " ");
    bool first = true;
    for (const auto& [ver, slot] : v.versions) {
      out += (first ? "" : ", ") + std::to_string(ver);
      first = false;
    }
    if (v.versions.size() > 1) out += "; default " + std::to_string(v.default_version);
    out += ")";
  }
  return out;
}

StatusOr<ModelRegistry::Lease> ModelRegistry::Acquire(const std::string& name,
                                                      std::optional<int64_t> version) const {
  // A version closed between reading the table and taking the lease was switched away
  // from: the table read again has its replacement.
  for (int attempt = 0; attempt < 8; ++attempt) {
    auto t = table();
    auto it = t->find(name);
    if (it == t->end()) {
      return NotFound("model " + Quote(name) + " is not served here; served: " + Describe(*t));
    }
    const int64_t v = version ? *version : it->second.default_version;
    auto vit = it->second.versions.find(v);
    if (vit == it->second.versions.end()) {
      return NotFound("version " + std::to_string(v) + " of model " + Quote(name) +
                      " is not served here; served: " + Describe(*t));
    }
    const std::shared_ptr<Slot>& slot = vit->second;
    {
      std::lock_guard<std::mutex> lock(slot->mu);
      if (!slot->closed) {
        ++slot->active;
        return Lease(slot);
      }
    }
    std::this_thread::yield();
  }
  return Status(StatusCode::kUnavailable, "model " + Quote(name) + " is switching versions; retry");
}

int ModelRegistry::active() const {
  auto t = table();
  int n = 0;
  for (const auto& [name, v] : *t) {
    for (const auto& [ver, slot] : v.versions) {
      std::lock_guard<std::mutex> lock(slot->mu);
      n += slot->active;
    }
  }
  return n;
}

void ModelRegistry::SetState(const std::string& name, int64_t version, std::string state,
                             std::string reason) {
  std::lock_guard<std::mutex> lock(status_mu_);
  states_[{name, version}] = {std::move(state), std::move(reason)};
}

void ModelRegistry::Publish() {
  auto t = std::make_shared<Table>();
  for (const auto& [name, st] : names_) {
    if (st.loaded.empty()) continue;
    NameView& v = (*t)[name];
    v.default_version = st.default_version;
    v.versions = st.loaded;
  }
  std::lock_guard<std::mutex> lock(table_mu_);
  table_ = std::move(t);
}

static std::string Bytes(int64_t b) {
  char buf[32];
  if (b >= (int64_t{1} << 30)) {
    std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(b) / (1 << 30));
  } else {
    std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(b) / (1 << 20));
  }
  return buf;
}

StatusOr<int64_t> ModelRegistry::Reserve(const LoadSpec& spec, int64_t pending) {
  if (options_.memory_budget_bytes <= 0 || !options_.estimate) return int64_t{0};
  ASSIGN_OR_RETURN(int64_t need, options_.estimate(spec));
  int64_t used = pending;
  std::string who;
  for (const auto& [n, st] : names_) {
    for (const auto& [v, slot] : st.loaded) {
      used += slot->bytes;
      who += (who.empty() ? "" : ", ") + Quote(n) + " version " + std::to_string(v) + " " +
             Bytes(slot->bytes);
    }
  }
  if (used + need > options_.memory_budget_bytes) {
    return FailedPrecondition(
        "needs " + Bytes(need) + " (estimate: weights in their serving dtype, KV cache), " +
        "more than the " + Bytes(std::max<int64_t>(0, options_.memory_budget_bytes - used)) +
        " left of --model-memory-budget " + Bytes(options_.memory_budget_bytes) +
        " (in use: " + (who.empty() ? "nothing" : who) +
        (pending > 0 ? "; this load: " + Bytes(pending) : "") + "); unload a model first");
  }
  return need;
}

StatusOr<std::shared_ptr<ModelRegistry::Slot>> ModelRegistry::LoadVersion(
    const std::string& name, int64_t version, const std::string& path,
    const serving::ModelConfig& config, int64_t charged) {
  SetState(name, version, "LOADING");
  const auto t0 = std::chrono::steady_clock::now();
  SLUICE_LOG_INFO("model \"{}\" version {}: loading {}", name, version, path);
  auto fail = [&](const Status& s) {
    std::lock_guard<std::mutex> lock(status_mu_);
    states_[{name, version}] = {"UNAVAILABLE", s.message()};
    ++counters_[{name, version}].loads_failed;
    SLUICE_LOG_WARN("model \"{}\" version {}: load failed: {}", name, version, s.message());
    return s;
  };
  LoadSpec spec{name, version, path, config};
  auto model = factory_(spec);
  if (!model.ok()) return fail(model.status());
  const double loaded = Since(t0);
  if (Status s = (*model)->WarmUp(); !s.ok()) {
    (*model)->Shutdown();
    return fail(s);
  }
  (*model)->SetReady();
  auto slot = std::make_shared<Slot>();
  slot->name = name;
  slot->version = version;
  slot->model = std::move(model).value();
  slot->bytes = charged;
  const double total = Since(t0);
  SLUICE_LOG_INFO(
      "model \"{}\" version {}: ready (task {}; loaded in {:.3f} s, warmed up in {:.3f} s)", name,
      version, slot->model->task(), loaded, total - loaded);
  std::lock_guard<std::mutex> lock(status_mu_);
  ++counters_[{name, version}].loads_ok;
  auto& h = load_seconds_[{name, version}];
  if (!h) h = std::make_unique<Histogram>(kLoadBounds);
  h->Observe(total);
  return slot;
}

void ModelRegistry::HoldEngineWhenIdle(Slot& old_default, ServedModel& successor,
                                       const LoopPlacement& old_placement,
                                       std::chrono::milliseconds hold) {
  // Held on the old engine's CPU while that engine still runs the batches routed before the
  // switch, the new engine thread would share one CPU with it for up to two batches: on 16
  // cores that added ~1-2.5 ms at p95/p99 in the 50 ms after a switch (docs/benchmarks.md,
  // issue 16). So it waits for the old version's requests to be answered, up to the hold's end
  // (clients pinned to the old version keep it busy: then the engine thread is left alone).
  const auto t0 = std::chrono::steady_clock::now();
  const auto end = t0 + hold;
  std::unique_lock<std::mutex> lock(old_default.mu);
  if (!old_default.cv.wait_until(lock, end, [&] { return old_default.active == 0; })) return;
  lock.unlock();
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
  if (left.count() > 0) successor.HoldPlacement(old_placement, left);
}

void ModelRegistry::Drain(const std::shared_ptr<Slot>& slot) {
  SetState(slot->name, slot->version, "UNLOADING");
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(slot->mu);
  slot->closed = true;
  const int in_flight = slot->active;
  const auto deadline = t0 + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                 std::chrono::duration<double>(options_.drain_timeout_s));
  bool idle = slot->cv.wait_until(lock, deadline, [&] { return slot->active == 0; });
  lock.unlock();
  if (!idle) {
    SLUICE_LOG_WARN("model \"{}\" version {}: {} requests still in flight after {} s: failing them",
                    slot->name, slot->version, slot->active, options_.drain_timeout_s);
  }
  slot->model->Shutdown();  // fails whatever is still queued (503)
  lock.lock();
  idle = slot->cv.wait_for(lock, std::chrono::seconds(2), [&] { return slot->active == 0; });
  lock.unlock();
  if (!idle) {
    SLUICE_LOG_WARN("model \"{}\" version {}: requests still hold it; kept loaded", slot->name,
                    slot->version);
    std::lock_guard<std::mutex> sl(status_mu_);
    leaked_.push_back(slot);
    states_[{slot->name, slot->version}] = {"UNAVAILABLE", "unloaded (stuck requests)"};
    return;
  }
  // A disconnect hook that fired as the last response went out may still be running.
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  slot->model.reset();
  SLUICE_LOG_INFO("model \"{}\" version {}: unloaded ({} requests drained in {:.3f} s)", slot->name,
                  slot->version, in_flight, Since(t0));
  std::lock_guard<std::mutex> sl(status_mu_);
  ++counters_[{slot->name, slot->version}].unloads;
  states_[{slot->name, slot->version}] = {"UNAVAILABLE", "unloaded"};
}

Status ModelRegistry::Sync(const std::string& name, const serving::ModelConfig& config,
                           std::optional<int64_t> pinned) {
  ASSIGN_OR_RETURN(std::vector<serving::VersionDir> dirs, repo_->Versions(name));
  for (const auto& [v, source] : config.sources) {
    for (const serving::VersionDir& d : dirs) {
      if (d.version == v) {
        return InvalidArgument("model " + Quote(name) + " version " + std::to_string(v) +
                               " is both a directory (" + d.path + ") and a model.json source (" +
                               source + ")");
      }
    }
    dirs.push_back(serving::VersionDir{v, source, true});
  }
  std::sort(dirs.begin(), dirs.end(),
            [](const serving::VersionDir& a, const serving::VersionDir& b) {
              return a.version < b.version;
            });
  if (dirs.empty()) {
    return NotFound("model " + Quote(name) +
                    " has no version directory (<name>/<version>/ with a positive integer "
                    "version) and no model.json source");
  }
  std::vector<int64_t> available;
  for (const auto& d : dirs) available.push_back(d.version);
  const std::optional<int64_t> pin = pinned ? pinned : config.default_version;
  auto want = serving::SelectVersions(config.policy, available, pin);
  if (!want.ok()) {
    return Status(
        want.status().code(), "model " + Quote(name) + ": " + want.status().message() +
                                  " (versions on disk: " +
                                  [&] {
                                    std::string s;
                                    for (int64_t v : available) {
                                      s += (s.empty() ? "" : ", ") + std::to_string(v);
                                    }
                                    return s;
                                  }() +
                                  ")");
  }
  const int64_t def = pin ? *pin : want->back();
  NameState& st = names_[name];
  // A changed config reloads every version (new instances replace the old ones the same
  // way a new version does).
  const bool reload = !st.loaded.empty() && !(st.config == config);
  std::map<int64_t, std::shared_ptr<Slot>> fresh;
  for (int64_t v : *want) {
    if (st.loaded.count(v) && !reload) continue;
    const auto dir = std::find_if(dirs.begin(), dirs.end(),
                                  [&](const serving::VersionDir& d) { return d.version == v; });
    int64_t pending = 0;
    for (const auto& [fv, fs] : fresh) pending += fs->bytes;
    StatusOr<std::shared_ptr<Slot>> slot = [&]() -> StatusOr<std::shared_ptr<Slot>> {
      std::string path = dir->path;
      std::shared_ptr<const void> hold;
      if (dir->source) {
        SetState(name, v, "LOADING");
        auto pulled = options_.pull
                          ? options_.pull(path)
                          : StatusOr<serving::PullResult>(FailedPrecondition(
                                "its model.json source " + path + " needs --model-cache DIR"));
        if (!pulled.ok()) {
          SetState(name, v, "UNAVAILABLE", pulled.status().message());
          std::lock_guard<std::mutex> lock(status_mu_);
          ++counters_[{name, v}].loads_failed;
          return pulled.status();
        }
        SLUICE_LOG_INFO("model \"{}\" version {}: {} {} ({}, {} bytes, sha256 {}) in {:.2f} s",
                        name, v, pulled->hit ? "cached" : "pulled", path,
                        pulled->hit ? "hit" : "miss", pulled->bytes, pulled->sha256.substr(0, 12),
                        pulled->seconds);
        path = pulled->path;
        hold = pulled->in_use;
      }
      auto charge = Reserve(LoadSpec{name, v, path, config}, pending);
      if (!charge.ok()) {
        SetState(name, v, "UNAVAILABLE", charge.status().message());
        std::lock_guard<std::mutex> lock(status_mu_);
        ++counters_[{name, v}].loads_failed;
        return charge.status();
      }
      auto loaded = LoadVersion(name, v, path, config, *charge);
      if (loaded.ok()) (*loaded)->cache_hold = std::move(hold);
      return loaded;
    }();
    if (!slot.ok()) {
      for (auto& [fv, s] : fresh) {
        s->model->Shutdown();
        s->model.reset();
        SetState(name, fv, "UNAVAILABLE",
                 "unloaded: version " + std::to_string(v) + " of the same load failed");
      }
      if (st.loaded.empty()) names_.erase(name);
      return Status(slot.status().code(), "model " + Quote(name) + " version " + std::to_string(v) +
                                              ": " + slot.status().message());
    }
    fresh[v] = std::move(slot).value();
  }
  std::vector<std::shared_ptr<Slot>> removed;
  std::map<int64_t, std::shared_ptr<Slot>> next = fresh;
  for (auto& [v, s] : st.loaded) {
    if (!reload && std::find(want->begin(), want->end(), v) != want->end()) {
      next[v] = s;
    } else {
      removed.push_back(s);
    }
  }
  const int64_t old_default = st.default_version;
  const auto old_slot = st.loaded.find(old_default);
  const bool hand_over =
      old_slot != st.loaded.end() && old_default != def && options_.switch_placement_ms > 0;
  const LoopPlacement old_placement =
      hand_over ? old_slot->second->model->placement() : LoopPlacement{};
  const std::shared_ptr<Slot> old_holder = hand_over ? old_slot->second : nullptr;
  const std::chrono::milliseconds hold(options_.switch_placement_ms);
  st.loaded = std::move(next);
  st.default_version = def;
  st.config = config;
  for (const auto& [v, s] : fresh) SetState(name, v, "READY");
  if (old_default != def && old_default != 0 && !fresh.count(def)) {
    // A loaded version becoming the default has idled since it last served: one small batch
    // wakes its engine thread and brings its weights back into cache before traffic moves.
    if (Status w = st.loaded.at(def)->model->WarmUp(); !w.ok()) {
      SLUICE_LOG_WARN("model \"{}\" version {}: warm-up before the switch failed: {}", name, def,
                      w.message());
    }
  }
  ServedModel* const successor = hand_over ? st.loaded.at(def)->model.get() : nullptr;
  if (hand_over) {
    // The old default's CPUs fall idle as traffic moves: its successor's threads run there
    // while the kernel learns their load (engine/engine_loop.h, placement). Its scheduler's
    // CPU idles at once; its engine's only when its last batches are done, so the engine
    // thread follows below.
    successor->HoldPlacement({old_placement.scheduler_cpu, -1}, hold);
  }
  Publish();  // the switch: one step for every router thread
  if (hand_over) HoldEngineWhenIdle(*old_holder, *successor, old_placement, hold);
  if (old_default != def && old_default != 0) {
    SLUICE_LOG_INFO("model \"{}\": default version {} -> {}", name, old_default, def);
    std::lock_guard<std::mutex> lock(status_mu_);
    ++counters_[{name, def}].switches;
  }
  for (const auto& s : removed) Drain(s);
  return Status::Ok();
}

Status ModelRegistry::Load(const std::string& name, const std::optional<std::string>& config_json) {
  std::lock_guard<std::mutex> lock(control_mu_);
  RETURN_IF_ERROR(serving::ValidateName(name));
  ASSIGN_OR_RETURN(serving::ModelConfig config, repo_->Config(name));
  if (config_json) {
    ASSIGN_OR_RETURN(config, serving::ParseModelConfig(*config_json, "config", std::move(config),
                                                       /*allow_plugins=*/false));
  }
  return Sync(name, config, std::nullopt);
}

Status ModelRegistry::SetDefault(const std::string& name, int64_t version) {
  std::lock_guard<std::mutex> lock(control_mu_);
  RETURN_IF_ERROR(serving::ValidateName(name));
  auto it = names_.find(name);
  if (it == names_.end()) {
    return FailedPrecondition("model " + Quote(name) + " is not loaded (load it first)");
  }
  const serving::ModelConfig config = it->second.config;
  return Sync(name, config, version);
}

Status ModelRegistry::Unload(const std::string& name) {
  std::lock_guard<std::mutex> lock(control_mu_);
  RETURN_IF_ERROR(serving::ValidateName(name));
  auto it = names_.find(name);
  if (it == names_.end()) {
    if (!repo_->Has(name)) {
      return NotFound("model " + Quote(name) + " is not in the repository");
    }
    return Status::Ok();  // not loaded: nothing to do
  }
  std::vector<std::shared_ptr<Slot>> slots;
  for (auto& [v, s] : it->second.loaded) slots.push_back(s);
  names_.erase(it);
  Publish();
  for (const auto& s : slots) Drain(s);
  return Status::Ok();
}

void ModelRegistry::UnloadAll(double drain_timeout_s) {
  std::vector<std::string> names;
  {
    std::lock_guard<std::mutex> lock(control_mu_);
    if (drain_timeout_s >= 0) options_.drain_timeout_s = drain_timeout_s;
    for (const auto& [n, st] : names_) names.push_back(n);
  }
  for (const auto& n : names) (void)Unload(n);
}

std::vector<ModelRegistry::IndexEntry> ModelRegistry::Index() const {
  std::vector<IndexEntry> out;
  std::set<std::string> names;
  for (const std::string& n : repo_->Names()) names.insert(n);
  std::lock_guard<std::mutex> lock(status_mu_);
  for (const auto& [key, st] : states_) names.insert(key.first);
  for (const std::string& n : names) {
    bool any = false;
    for (auto it = states_.lower_bound({n, 0}); it != states_.end() && it->first.first == n; ++it) {
      out.push_back(IndexEntry{n, it->first.second, it->second.first, it->second.second});
      any = true;
    }
    if (!any) out.push_back(IndexEntry{n, std::nullopt, "", ""});
  }
  return out;
}

std::string ModelRegistry::RenderMetrics() const {
  auto t = table();
  std::string out;
  auto labels = [](const std::string& n, int64_t v) { return ModelLabels(n, std::to_string(v)); };
  std::lock_guard<std::mutex> lock(status_mu_);
  out +=
      "# HELP sluice_model_loads_total Version loads (load, warm-up) by result.\n"
      "# TYPE sluice_model_loads_total counter\n";
  for (const auto& [k, c] : counters_) {
    out += "sluice_model_loads_total{" + labels(k.first, k.second) + ",result=\"ok\"} " +
           std::to_string(c.loads_ok) + "\n";
    out += "sluice_model_loads_total{" + labels(k.first, k.second) + ",result=\"error\"} " +
           std::to_string(c.loads_failed) + "\n";
  }
  out +=
      "# HELP sluice_model_unloads_total Versions drained and unloaded.\n"
      "# TYPE sluice_model_unloads_total counter\n";
  for (const auto& [k, c] : counters_) {
    out += "sluice_model_unloads_total{" + labels(k.first, k.second) + "} " +
           std::to_string(c.unloads) + "\n";
  }
  out +=
      "# HELP sluice_model_default_switches_total Times the default version of a name moved to "
      "this version.\n"
      "# TYPE sluice_model_default_switches_total counter\n";
  for (const auto& [k, c] : counters_) {
    out += "sluice_model_default_switches_total{" + labels(k.first, k.second) + "} " +
           std::to_string(c.switches) + "\n";
  }
  out +=
      "# HELP sluice_model_load_seconds Load plus warm-up time of a version.\n"
      "# TYPE sluice_model_load_seconds histogram\n";
  for (const auto& [k, h] : load_seconds_) {
    h->Render(&out, "sluice_model_load_seconds", labels(k.first, k.second));
  }
  out +=
      "# HELP sluice_model_memory_bytes The memory estimate a version is charged against "
      "--model-memory-budget (0 without a budget).\n"
      "# TYPE sluice_model_memory_bytes gauge\n";
  for (const auto& [name, v] : *t) {
    for (const auto& [ver, slot] : v.versions) {
      out += "sluice_model_memory_bytes{" + labels(name, ver) + "} " + std::to_string(slot->bytes) +
             "\n";
    }
  }
  out +=
      "# HELP sluice_model_memory_budget_bytes --model-memory-budget (0 = none).\n"
      "# TYPE sluice_model_memory_budget_bytes gauge\n"
      "sluice_model_memory_budget_bytes " +
      std::to_string(options_.memory_budget_bytes) + "\n";
  out +=
      "# HELP sluice_model_version_ready 1 for each version that serves requests.\n"
      "# TYPE sluice_model_version_ready gauge\n";
  out +=
      "# HELP sluice_model_default_version The default version of each served name.\n"
      "# TYPE sluice_model_default_version gauge\n";
  std::string ready, defaults;
  for (const auto& [name, v] : *t) {
    for (const auto& [ver, slot] : v.versions) {
      ready += "sluice_model_version_ready{" + labels(name, ver) + "} 1\n";
    }
    defaults += "sluice_model_default_version{model=\"" + LabelValue(name) + "\"} " +
                std::to_string(v.default_version) + "\n";
  }
  // (each family's samples after its own header)
  const size_t cut = out.find("# HELP sluice_model_default_version");
  out.insert(cut, ready);
  out += defaults;
  out += serving::RenderCacheMetrics();
  return out;
}

}  // namespace sluice::server
