// Batch-level logits processors, the engine's side (include/sluice/plugin.h is the plugin's
// side; docs/plugins.md the contract). A LogitsProcessor serves one Generator: the sequences
// that selected it are its rows, numbered densely [0, batch_size). Before each step the
// engine reports, in one LpUpdate, the rows that left (removed), joined (added; a sequence
// back from preemption is flagged SLUICE_ROW_RESET with its full history) and changed index
// (moved), in that order, and the rows in partial prefill; then asks for the allowed-token
// bitmask of every row that samples in the step. LogitsRows keeps one processor's row
// numbering and builds its updates.
//
// The built-in structured-output constraint (StructuredProcessor) and plugin processors
// (engine/plugins.h) implement the same interface.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "sluice/plugin.h"
#include "sluice/status.h"

namespace sluice {

struct SamplingParams;

// A row joining a processor: the C view (row, flags, params, prompt, live output) and, for
// built-in processors, the request's parsed sampling parameters.
struct LpAddedRow {
  sluice_added_row c{};
  const SamplingParams* params = nullptr;
};

struct LpUpdate {
  int32_t batch_size = 0;
  std::vector<int32_t> removed;
  std::vector<LpAddedRow> added;
  std::vector<sluice_moved_row> moved;
  std::vector<int32_t> partial;  // rows (after moves) in partial prefill this step
  void Clear() {
    removed.clear();
    added.clear();
    moved.clear();
    partial.clear();
  }
};

class LogitsProcessor {
 public:
  virtual ~LogitsProcessor() = default;
  virtual const std::string& name() const = 0;
  // Masking never changes a greedy row's pick: the engine skips FillMask for greedy rows
  // that want no logprobs.
  virtual bool argmax_invariant() const { return false; }
  // On the engine's thread, before each step that has rows or changes.
  virtual void UpdateState(const LpUpdate& update) = 0;
  // The allowed next tokens of `row` (all allowed on entry; clear the forbidden ones).
  // Called concurrently for distinct rows; an error fails that row's request only.
  virtual Status FillMask(int32_t row, uint32_t* mask) = 0;
};

// A sequence's membership in one processor (owned by the engine's per-sequence state, whose
// address is stable while the membership lasts).
struct LpSlot {
  int proc = -1;          // which processor of the engine
  int32_t row = -1;       // its row, once reported
  bool pending = false;   // joins at the next Flush
  bool reported = false;  // was a row once (a later join is a reset)
  LpAddedRow info;        // what the join reports (flags set by Flush)
};

class LogitsRows {
 public:
  LogitsRows(LogitsProcessor* processor, int max_rows) : p_(processor), max_rows_(max_rows) {}
  LogitsProcessor& processor() { return *p_; }
  int32_t batch_size() const { return size_; }

  // The sequence joins at the next Flush (slot->info filled by the caller).
  void Add(LpSlot* slot);
  // The sequence leaves (finished, cancelled, preempted): slot->row is -1 at once.
  void Remove(LpSlot* slot);
  // Assigns the joining rows (free rows first), compacts (the last rows move into holes),
  // marks `partial` (slots whose step item does not sample) and calls UpdateState when the
  // processor has rows or something changed.
  void Flush(const std::vector<const LpSlot*>& partial);

 private:
  LogitsProcessor* p_;
  int max_rows_;
  int32_t size_ = 0;
  std::vector<LpSlot*> slots_;  // by row; nullptr: removed since the last Flush
  std::vector<LpSlot*> joining_;
  LpUpdate update_;
};

// One step's masks: a group per masked sampling row, the processors (jobs) that fill it.
struct LpMaskJob {
  int proc;
  int32_t row;
};
struct LpMaskGroup {
  void* owner;     // the engine's sequence
  int begin, end;  // its jobs
  Status error;    // a processor's error, or no token left
};
// Fills mask i (words = (vocab + 31) / 32, masks + i * words) of each group on the pool: all
// tokens allowed, then each job's processor (the first writes into the mask, later ones into
// a scratch mask ANDed in); a mask left empty is an error of its group.
class ThreadPool;
void FillLogitsMasks(ThreadPool& pool, const std::vector<std::unique_ptr<LogitsProcessor>>& procs,
                     const std::vector<LpMaskJob>& jobs, std::vector<LpMaskGroup>* groups,
                     int vocab, uint32_t* masks);

// Structured outputs (docs/structured-outputs.md) as a logits processor: each row's DFA state
// after its output so far, and its mask.
std::unique_ptr<LogitsProcessor> MakeStructuredProcessor(int max_rows);
inline constexpr const char* kStructuredProcessorName = "structured_outputs";

}  // namespace sluice
