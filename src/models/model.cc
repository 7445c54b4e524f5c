#include "models/model.h"

#include <algorithm>
#include <climits>

namespace sluice {

void ForwardBatch::Clear() {
  token_ids.clear();
  token_type_ids.clear();
  cu_seqlens.clear();
  max_seqlen = 0;
  prefix_of.clear();
  key_lens.clear();
  kv_start.clear();
  kv_block_table.clear();
  kv_blocks_per_seq = 0;
  kv_slots.clear();
  output_rows.clear();
}

void ForwardBatch::Add(const std::vector<int32_t>& ids, const std::vector<int32_t>& type_ids,
                       int32_t attended) {
  if (cu_seqlens.empty()) cu_seqlens.push_back(0);
  if (attended > 0 || !key_lens.empty()) {
    key_lens.resize(static_cast<size_t>(num_seqs()), INT32_MAX);  // the earlier sequences: all
    key_lens.push_back(attended > 0 ? attended : INT32_MAX);
  }
  const bool had_types = !token_type_ids.empty();
  if (!type_ids.empty() && !had_types) token_type_ids.assign(token_ids.size(), 0);
  token_ids.insert(token_ids.end(), ids.begin(), ids.end());
  if (!type_ids.empty()) {
    token_type_ids.insert(token_type_ids.end(), type_ids.begin(), type_ids.end());
  } else if (had_types) {
    token_type_ids.resize(token_ids.size(), 0);
  }
  cu_seqlens.push_back(static_cast<int32_t>(token_ids.size()));
  if (!prefix_of.empty()) prefix_of.push_back(-1);
  max_seqlen = std::max(max_seqlen, static_cast<int>(ids.size()));
}

void ForwardBatch::AddWithPrefix(const int32_t* ids, int n, int prefix) {
  if (cu_seqlens.empty()) cu_seqlens.push_back(0);
  prefix_of.resize(static_cast<size_t>(num_seqs()), -1);
  if (!key_lens.empty()) key_lens.push_back(INT32_MAX);
  token_ids.insert(token_ids.end(), ids, ids + n);
  if (!token_type_ids.empty()) token_type_ids.resize(token_ids.size(), 0);
  cu_seqlens.push_back(static_cast<int32_t>(token_ids.size()));
  prefix_of.push_back(prefix);
  max_seqlen = std::max(max_seqlen, n);
}

Tensor Workspace::Get(int slot, DType dtype, int64_t rows, int64_t cols) {
  if (static_cast<size_t>(slot) >= buffers_.size()) {
    buffers_.resize(slot + 1);
    capacity_.resize(slot + 1, 0);
  }
  const int64_t bytes = rows * cols * static_cast<int64_t>(DTypeSize(dtype));
  if (bytes > capacity_[slot]) {
    // Grow with headroom so slowly increasing batch sizes do not reallocate each time.
    const int64_t want = std::max<int64_t>(bytes, capacity_[slot] * 5 / 4);
    buffers_[slot] = backend_->Allocate(DType::kF32, 1, (want + 3) / 4);
    capacity_[slot] = (want + 3) / 4 * 4;
  }
  Tensor t;
  t.data = buffers_[slot].t().data;
  t.dtype = dtype;
  t.rows = rows;
  t.cols = cols;
  return t;
}

void Model::PackInputs(const ForwardBatch& batch, const InputLayout& layout, OutputRows rows,
                       int32_t* host) const {
  const int64_t T = batch.num_tokens();
  const int S = batch.num_seqs();
  int32_t* ids = host + layout.ids();
  int32_t* types = host + layout.types();
  int32_t* positions = host + layout.positions();
  int32_t* cu = host + layout.cu_seqlens();
  int32_t* out_rows = host + layout.rows();
  std::copy(batch.token_ids.begin(), batch.token_ids.end(), ids);
  std::fill(ids + T, ids + layout.tokens, 0);
  if (batch.token_type_ids.empty()) {
    std::fill(types, types + layout.tokens, 0);
  } else {
    std::copy(batch.token_type_ids.begin(), batch.token_type_ids.end(), types);
    std::fill(types + T, types + layout.tokens, 0);
  }
  for (int s = 0; s < S; ++s) {
    // A sequence with a prefix continues it: its own tokens start at the prefix's length;
    // one with cached tokens continues those.
    const int32_t before = batch.PrefixLength(s) + (batch.kv_start.empty() ? 0 : batch.kv_start[s]);
    const int32_t start = batch.cu_seqlens[s] - before;
    for (int32_t i = batch.cu_seqlens[s]; i < batch.cu_seqlens[s + 1]; ++i) {
      positions[i] = i - start + position_offset();
    }
  }
  std::fill(positions + T, positions + layout.tokens, 0);
  std::copy(batch.cu_seqlens.begin(), batch.cu_seqlens.end(), cu);
  std::fill(cu + S + 1, cu + layout.seqs + 1, static_cast<int32_t>(T));
  int64_t R = S;
  if (!batch.output_rows.empty()) {
    R = static_cast<int64_t>(batch.output_rows.size());
    std::copy(batch.output_rows.begin(), batch.output_rows.end(), out_rows);
  } else {
    for (int s = 0; s < S; ++s) {
      out_rows[s] = rows == OutputRows::kFirst  ? batch.cu_seqlens[s]
                    : rows == OutputRows::kLast ? batch.cu_seqlens[s + 1] - 1
                                                : 0;
    }
  }
  std::fill(out_rows + R, out_rows + layout.num_rows(), 0);
  int32_t* prefix_of = host + layout.prefix_of();
  if (batch.prefix_of.empty()) {
    std::fill(prefix_of, prefix_of + layout.seqs, -1);
  } else {
    std::copy(batch.prefix_of.begin(), batch.prefix_of.end(), prefix_of);
    std::fill(prefix_of + S, prefix_of + layout.seqs, -1);
  }
  int32_t* key_lens = host + layout.key_lens();
  std::copy(batch.key_lens.begin(), batch.key_lens.end(), key_lens);
  std::fill(key_lens + batch.key_lens.size(), key_lens + layout.seqs, INT32_MAX);
  if (layout.blocks_per_seq > 0) {
    int32_t* kv_start = host + layout.kv_start();
    int32_t* slots = host + layout.kv_slots();
    int32_t* table = host + layout.kv_block_table();
    std::copy(batch.kv_start.begin(), batch.kv_start.end(), kv_start);
    std::fill(kv_start + S, kv_start + layout.seqs, 0);
    std::copy(batch.kv_slots.begin(), batch.kv_slots.end(), slots);
    std::fill(slots + T, slots + layout.tokens, 0);
    const int64_t B = layout.blocks_per_seq;
    for (int s = 0; s < S; ++s) {
      const int32_t* src = batch.kv_block_table.data() + s * batch.kv_blocks_per_seq;
      std::copy(src, src + batch.kv_blocks_per_seq, table + s * B);
      std::fill(table + s * B + batch.kv_blocks_per_seq, table + (s + 1) * B, 0);
    }
    std::fill(table + S * B, table + layout.seqs * B, 0);
  }
}

DeviceBatch Model::BindInputs(const ForwardBatch& batch, const InputLayout& layout, OutputRows rows,
                              const Tensor& device, bool bind_prefix_of) const {
  DeviceBatch d;
  d.num_seqs = batch.num_seqs();
  d.max_seqlen = batch.max_seqlen;
  d.num_tokens = batch.num_tokens();
  for (int s = 0; s < d.num_seqs; ++s) {
    d.max_context = std::max(d.max_context, batch.cu_seqlens[s + 1] - batch.cu_seqlens[s] +
                                                batch.PrefixLength(s) +
                                                (batch.kv_start.empty() ? 0 : batch.kv_start[s]));
  }
  auto view = [&](int64_t offset, int64_t n) {
    Tensor t;
    t.data = device.ptr<int32_t>() + offset;
    t.dtype = DType::kI32;
    t.rows = 1;
    t.cols = n;
    return t;
  };
  d.ids = view(layout.ids(), d.num_tokens);
  d.type_ids = view(layout.types(), d.num_tokens);
  d.positions = view(layout.positions(), d.num_tokens);
  d.cu_seqlens = view(layout.cu_seqlens(), d.num_seqs + 1);
  if (!batch.output_rows.empty()) {
    d.num_output_rows = static_cast<int>(batch.output_rows.size());
    d.output_rows = view(layout.rows(), d.num_output_rows);
  } else if (rows != OutputRows::kNone) {
    d.output_rows = view(layout.rows(), d.num_seqs);
    d.num_output_rows = d.num_seqs;
  }
  if (bind_prefix_of || !batch.prefix_of.empty()) {
    d.prefix_of = view(layout.prefix_of(), d.num_seqs);
  }
  if (bind_prefix_of || !batch.key_lens.empty()) d.key_lens = view(layout.key_lens(), d.num_seqs);
  if (layout.blocks_per_seq > 0) {
    d.kv_start = view(layout.kv_start(), d.num_seqs);
    d.kv_slots = view(layout.kv_slots(), d.num_tokens);
    d.kv_blocks_per_seq = static_cast<int>(layout.blocks_per_seq);
    d.kv_block_table = view(layout.kv_block_table(), d.num_seqs * layout.blocks_per_seq);
  }
  return d;
}

Status Model::CheckBatch(const ForwardBatch& batch) const {
  if (batch.num_seqs() == 0) return Internal("empty batch");
  const int S = batch.num_seqs();
  if (!batch.kv_start.empty()) {
    if (!SupportsKvCache()) return Internal("this model does not support a KV cache");
    if (!batch.prefix_of.empty()) return Internal("prefix_of and a KV cache exclude each other");
    if (batch.kv_start.size() != static_cast<size_t>(S) ||
        batch.kv_slots.size() != static_cast<size_t>(batch.num_tokens()) ||
        batch.kv_block_table.size() != static_cast<size_t>(S) * batch.kv_blocks_per_seq) {
      return Internal("KV cache inputs do not match the batch");
    }
  }
  if (!batch.key_lens.empty()) {
    if (!SupportsKeyLimits()) {
      return InvalidArgument(
          "this model cannot leave tokens out of the attention's keys (TokenSequence::attended; "
          "encoders of the BERT family and ModernBERT can)");
    }
    if (batch.key_lens.size() != static_cast<size_t>(S)) {
      return Internal("key_lens must have one entry per sequence");
    }
    for (int s = 0; s < S; ++s) {
      if (batch.key_lens[s] < 1) {
        return Internal("sequence " + std::to_string(s) + ": key_lens must be >= 1");
      }
    }
  }
  if (!batch.prefix_of.empty()) {
    if (!SupportsPrefixReuse()) return Internal("this model does not support prefix reuse");
    if (batch.prefix_of.size() != static_cast<size_t>(S)) {
      return Internal("prefix_of must have one entry per sequence");
    }
    for (int s = 0; s < S; ++s) {
      const int p = batch.prefix_of[s];
      if (p >= 0 && (p >= S || p == s || batch.prefix_of[p] >= 0)) {
        return Internal("sequence " + std::to_string(s) +
                        ": prefix_of must name another sequence that has no prefix itself");
      }
    }
  }
  return Status::Ok();
}

}  // namespace sluice
