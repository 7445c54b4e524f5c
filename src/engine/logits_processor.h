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
  // Whether FillAllowed can answer (a plugin with fill_allowed).
  virtual bool has_allowed() const { return false; }
  // The allowed next tokens of `row` as a list (sluice_logits_processor.fill_allowed):
  // *count in [0, capacity] ids written to `ids`, or *count < 0 or > capacity: no list, the
  // engine calls FillMask. Same threading as FillMask.
  virtual Status FillAllowed(int32_t row, int32_t* ids, int32_t capacity, int32_t* count) {
    (void)row;
    (void)ids;
    (void)capacity;
    *count = -1;
    return Status::Ok();
  }
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
  // Where FillLogitsMasks put the group's allowed tokens (neither on error): its bitmask
  // (LpMaskOut::masks + mask * words), or its sparse list (LpMaskOut::allowed
  // [allowed_begin, allowed_end)).
  int mask = -1;
  int allowed_begin = -1, allowed_end = -1;
};
// The step's staging: room for one bitmask of words = (vocab + 31) / 32 words and for words
// token ids per group (a list never takes more than a bitmask); filled densely from 0.
struct LpMaskOut {
  uint32_t* masks = nullptr;
  int32_t* allowed = nullptr;
  int num_masks = 0;    // bitmasks written
  int num_allowed = 0;  // ids written
};
// Fills the allowed tokens of each group on the pool. A group of one job whose processor
// has_allowed() first asks for a sparse list (capacity words ids; ids checked in
// [0, vocab)); otherwise, or when the processor gives no list, a bitmask: all tokens allowed,
// then each job's processor (the first writes into the mask, later ones into a scratch mask
// ANDed in). An empty list or mask is an error of its group.
class ThreadPool;
void FillLogitsMasks(ThreadPool& pool, const std::vector<std::unique_ptr<LogitsProcessor>>& procs,
                     const std::vector<LpMaskJob>& jobs, std::vector<LpMaskGroup>* groups,
                     int vocab, LpMaskOut* out);

// Structured outputs (docs/structured-outputs.md) as a logits processor: each row's DFA state
// after its output so far, and its mask.
std::unique_ptr<LogitsProcessor> MakeStructuredProcessor(int max_rows);
inline constexpr const char* kStructuredProcessorName = "structured_outputs";

}  // namespace sluice
