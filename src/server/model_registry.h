// The loaded models of a server: for each served name its ready versions and its default
// version, with the operations of the repository API (docs/model-ops.md):
//
//   Load(name[, config])  syncs the name with the repository: the versions its version
//                         policy selects are loaded and warmed up (each becomes ready only
//                         after its warm-up), then the routing table switches to them at once
//                         (the default moves to model.json's default_version, else the newest),
//                         then the versions no longer selected drain and unload. If any load
//                         fails, the new versions are discarded and what was serving stays.
//   SetDefault(name, v)   the same with v pinned as the default (rollback / roll forward): v is
//                         loaded if it is not, `latest N` keeps v and the newest N-1 others.
//   Unload(name)          the name leaves the routing table; its versions drain and unload.
//
// Idempotent: a Load that changes nothing, an Unload of a name not loaded, succeed. Control
// operations are serialised (one at a time); routing (Acquire) never waits for them: it reads
// an immutable table swapped in one step. A request holds a Lease on the version that serves
// it from routing until its response is handed to the transport; a draining version waits
// for its leases to end (up to drain_timeout_s, then its queued work fails with 503).
//
// Thread-safe. Control operations block (a load runs the model's load and warm-up): call
// them from a thread that may wait, never from an I/O thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "server/metrics.h"
#include "server/served_model.h"
#include "serving/model_cache.h"
#include "serving/repository.h"

namespace sluice::server {

struct LoadSpec {
  std::string name;
  int64_t version = 0;
  std::string path;             // the version's model directory
  serving::ModelConfig config;  // model.json (with a load request's override)
};

using ModelFactory = std::function<StatusOr<std::unique_ptr<ServedModel>>(const LoadSpec&)>;

// The memory a version will take (weights in their serving dtype, a generation model's KV
// cache), estimated before it loads.
using MemoryEstimator = std::function<StatusOr<int64_t>(const LoadSpec&)>;

struct RegistryOptions {
  double drain_timeout_s = 30;  // a draining version's in-flight requests get this long
  // Bytes all loaded versions may take together (0 = no budget). A load whose estimate does
  // not fit beside what is loaded (during a switch both versions are) is refused with the
  // numbers, before anything of it loads.
  int64_t memory_budget_bytes = 0;
  MemoryEstimator estimate;  // required with a budget
  // Materialises a model.json "sources" entry (serving/model_cache.h) into a directory; unset
  // without --model-cache (such a version then fails to load, naming the flag).
  std::function<StatusOr<serving::PullResult>(const std::string& source)> pull;
  // A default switch runs the new default's loop threads on the CPUs the old default's ran
  // on for this long (EngineLoop::HoldPlacement): its scheduler thread from the switch, its
  // engine thread once the old version has answered what was routed to it (the switch call
  // waits for that, at most this long); 0: leave placement to the kernel.
  int switch_placement_ms = 150;
};

class ModelRegistry {
 public:
  // One loaded version.
  struct Slot {
    std::string name;
    int64_t version = 0;
    std::unique_ptr<ServedModel> model;
    std::mutex mu;
    std::condition_variable cv;
    int active = 0;                          // leases held
    bool closed = false;                     // draining: no new leases
    int64_t bytes = 0;                       // the memory estimate it is charged (with a budget)
    std::shared_ptr<const void> cache_hold;  // a pulled source: eviction skips it while loaded
  };

  // Holds a version for one request; released on destruction.
  class Lease {
   public:
    Lease() = default;
    explicit Lease(std::shared_ptr<Slot> slot) : slot_(std::move(slot)) {}
    Lease(Lease&& o) noexcept = default;
    Lease& operator=(Lease&& o) noexcept;
    ~Lease() { Release(); }
    ServedModel& model() const { return *slot_->model; }
    const std::string& name() const { return slot_->name; }
    int64_t version() const { return slot_->version; }
    void Release();

   private:
    std::shared_ptr<Slot> slot_;
  };

  struct NameView {
    int64_t default_version = 0;
    std::map<int64_t, std::shared_ptr<Slot>> versions;  // ready versions
  };
  using Table = std::map<std::string, NameView>;

  ModelRegistry(const serving::Repository* repo, ModelFactory factory, RegistryOptions options);
  ~ModelRegistry();  // UnloadAll

  // `config_json`: a model.json override for this load (fields over the file's).
  Status Load(const std::string& name, const std::optional<std::string>& config_json = {});
  Status Unload(const std::string& name);
  Status SetDefault(const std::string& name, int64_t version);
  // Unloads every name; `drain_timeout_s` >= 0 replaces the drain timeout from now on.
  void UnloadAll(double drain_timeout_s = -1);

  // The routing table now (immutable; safe to read while control operations run).
  std::shared_ptr<const Table> table() const;
  // The version that serves `name` (its default when `version` is unset). NotFound names
  // what is served.
  StatusOr<Lease> Acquire(const std::string& name, std::optional<int64_t> version) const;
  // `"a" (versions 1, 2; default 2), "b" (version 1)`, or "no models".
  static std::string Describe(const Table& t);

  struct IndexEntry {
    std::string name;
    std::optional<int64_t> version;
    std::string state;  // READY | LOADING | UNLOADING | UNAVAILABLE | "" (never loaded)
    std::string reason;
  };
  // Every name of the repository, with the state of each version loaded or tried.
  std::vector<IndexEntry> Index() const;
  // Versions on disk and their states, for the metadata routes.
  const serving::Repository& repository() const { return *repo_; }

  // Load/unload/default-switch counters, load durations, readiness and default gauges.
  std::string RenderMetrics() const;
  // Leases held over all versions (requests in flight).
  int active() const;

 private:
  struct NameState {
    std::map<int64_t, std::shared_ptr<Slot>> loaded;
    int64_t default_version = 0;
    serving::ModelConfig config;
  };
  struct Counters {
    uint64_t loads_ok = 0, loads_failed = 0, unloads = 0, switches = 0;
  };

  // Under control_mu_.
  Status Sync(const std::string& name, const serving::ModelConfig& config,
              std::optional<int64_t> pinned);
  StatusOr<std::shared_ptr<Slot>> LoadVersion(const std::string& name, int64_t version,
                                              const std::string& path,
                                              const serving::ModelConfig& config, int64_t charged);
  // With a budget: the estimate of a version, refused if it does not fit beside `pending`
  // bytes loaded by the same operation.
  StatusOr<int64_t> Reserve(const LoadSpec& spec, int64_t pending);
  void Publish();
  // After a default switch: holds `successor`'s threads on the old default's CPUs once the old
  // default has no request left, if that happens within `hold` (which it then shortens).
  void HoldEngineWhenIdle(Slot& old_default, ServedModel& successor,
                          const LoopPlacement& old_placement, std::chrono::milliseconds hold);
  void Drain(const std::shared_ptr<Slot>& slot);
  void SetState(const std::string& name, int64_t version, std::string state,
                std::string reason = "");

  const serving::Repository* repo_;
  ModelFactory factory_;
  RegistryOptions options_;

  std::mutex control_mu_;
  std::map<std::string, NameState> names_;  // control_mu_

  mutable std::mutex table_mu_;
  std::shared_ptr<const Table> table_;

  mutable std::mutex status_mu_;  // the fields below
  std::map<std::pair<std::string, int64_t>, std::pair<std::string, std::string>> states_;
  std::map<std::pair<std::string, int64_t>, Counters> counters_;
  std::map<std::pair<std::string, int64_t>, std::unique_ptr<Histogram>> load_seconds_;
  std::vector<std::shared_ptr<Slot>> leaked_;  // drained past every timeout: never destroyed
};

}  // namespace sluice::server
