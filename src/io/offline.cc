#include "io/offline.h"

#include <algorithm>
#include <cstdint>

#include "io/inputs.h"
#include "weights/config.h"

namespace sluice::io {

bool UsesTokenTypes(const Engine& engine) { return engine.model().config().type_vocab_size > 1; }

TokenSequence AssemblePair(const PairTemplate& t, const std::vector<int32_t>& q,
                           const std::vector<int32_t>& d, bool use_types) {
  TokenSequence s;
  s.ids = t.prefix;
  s.ids.insert(s.ids.end(), q.begin(), q.end());
  s.ids.insert(s.ids.end(), t.separator.begin(), t.separator.end());
  const size_t first = s.ids.size();
  s.ids.insert(s.ids.end(), d.begin(), d.end());
  s.ids.insert(s.ids.end(), t.suffix.begin(), t.suffix.end());
  if (use_types) {
    s.type_ids.assign(s.ids.size(), 0);
    std::fill(s.type_ids.begin() + static_cast<long>(first), s.type_ids.end(), 1);
  }
  return s;
}

Status EncodeTexts(const Engine& engine, const EncodeOptions& options, ThreadPool* pool,
                   OfflineInputs* inputs) {
  if (inputs->texts.empty()) return Status::Ok();
  auto where = [&](const OfflineText& t) { return options.where(t); };
  if (!engine.bundle().tokenizer) {
    return InvalidArgument(where(inputs->texts[0]) +
                           ": text input needs a tokenizer (tokenizer.json or vocab.txt in " +
                           engine.info().dir +
                           "); pass token ids (\"input_ids\" or \"q\"/\"d\") instead");
  }
  const Tokenizer& tok = *engine.bundle().tokenizer;
  if (engine.head().yes_no) {
    for (const OfflineText& t : inputs->texts) {
      if (t.pair) {
        return InvalidArgument(where(t) +
                               ": text pairs for causal-LM rerankers need their prompt template, "
                               "which the offline CLI does not apply; use `sluice serve` or "
                               "token ids (\"q\"/\"d\" with a prefix/separator/suffix header)");
      }
    }
  }
  const bool use_types = UsesTokenTypes(engine);
  const int limit = engine.info().max_sequence_length;
  const size_t max_len = limit > 0 ? static_cast<size_t>(limit) : SIZE_MAX;
  std::vector<Status> errors(inputs->texts.size(), Status::Ok());
  if (options.keep_encodings) inputs->encodings.resize(inputs->texts.size());
  pool->ParallelFor(
      inputs->texts.size(),
      [&](size_t begin, size_t end) {
        for (size_t i = begin; i < end; ++i) {
          const OfflineText& t = inputs->texts[i];
          TruncationParams tp;
          tp.max_length = max_len;
          tp.strategy =
              t.pair ? TruncationStrategy::kOnlySecond : TruncationStrategy::kLongestFirst;
          const TruncationParams* trunc = options.truncate && limit > 0 ? &tp : nullptr;
          auto enc = t.pair ? tok.EncodePair(t.a, t.b, true, trunc) : tok.Encode(t.a, true, trunc);
          if (!enc.ok()) {
            errors[i] =
                InvalidArgument(where(t) + ": could not be tokenised: " + enc.status().message());
            continue;
          }
          if (enc->size() > max_len) {
            errors[i] = OutOfRange(where(t) + ": " + std::to_string(enc->size()) +
                                   " tokens, over the model's limit of " + std::to_string(max_len) +
                                   " tokens; shorten it or " + options.truncate_hint +
                                   (t.pair ? " (cuts the second text)" : ""));
            continue;
          }
          TokenSequence& s = inputs->seqs[t.index];
          s.ids = enc->ids;
          if (use_types) s.type_ids = enc->type_ids;
          if (options.keep_encodings) inputs->encodings[i] = std::move(enc).value();
        }
      },
      16);
  for (const Status& e : errors) RETURN_IF_ERROR(e);
  return Status::Ok();
}

Status MarkQueryExpansion(const Engine& engine, std::vector<TokenSequence>* seqs) {
  if (!engine.head().late_interaction) return Status::Ok();
  ASSIGN_OR_RETURN(QueryExpansion qe,
                   ResolveQueryExpansion(engine.bundle().st, engine.bundle().overrides, true));
  if (qe.length == 0 || qe.attend) return Status::Ok();
  const Tokenizer* tok = engine.bundle().tokenizer.get();
  const std::optional<int32_t> mask =
      tok ? tok->TokenToId(tok->config().mask_token.value_or("[MASK]")) : std::nullopt;
  if (!mask) {
    return FailedPrecondition(
        "query_length (ColBERT query augmentation) needs the tokenizer's mask token "
        "(tokenizer.json with tokenizer_config.json mask_token, or a [MASK] token)");
  }
  if (!engine.model().SupportsKeyLimits()) {
    return Unsupported(
        "attend_to_expansion_tokens false (ColBERT query expansion tokens the other tokens do "
        "not attend) needs an encoder of the BERT family or ModernBERT");
  }
  ModelContext m;
  m.late_interaction = true;
  m.query_length = qe.length;
  m.query_mask_id = *mask;
  m.query_expansion_attended = false;
  for (TokenSequence& s : *seqs) io::MarkQueryExpansion(m, &s);
  return Status::Ok();
}

void DropDocumentSkiplist(const Engine& engine, const std::vector<TokenSequence>& seqs,
                          std::vector<PooledOutput>* outs) {
  const Tokenizer* tok = engine.bundle().tokenizer.get();
  const SluiceOverrides& ov = engine.bundle().overrides;
  if (!engine.head().late_interaction || !tok) return;
  auto texts = ResolveLateInteractionTexts(engine.bundle().st, ov);
  if (!texts.ok() || texts->document_prefix.empty()) return;
  ModelContext m;
  m.late_interaction = true;
  m.document_prefix_id = tok->TokenToId(texts->document_prefix).value_or(-1);
  m.skiplist_ids = SkiplistIds(*tok, ResolveSkiplistWords(engine.bundle().st, ov));
  for (size_t i = 0; i < seqs.size() && i < outs->size(); ++i) {
    if (IsMarkedDocument(m, seqs[i])) DropSkiplistRows(seqs[i].ids, m.skiplist_ids, &(*outs)[i]);
  }
}

Status CheckDimensions(const Engine& engine, int dimensions, const std::string& flag) {
  const HeadSpec& head = engine.head();
  if (engine.info().task != Task::kEmbed || head.pooling == PoolingKind::kAll ||
      head.pooling == PoolingKind::kStep) {
    return InvalidArgument(flag + " applies to embedding models (one vector per input) only");
  }
  const Matryoshka m = ResolveMatryoshka(engine.model().config(), engine.bundle().overrides);
  if (std::string why = MatryoshkaDimensionsError(m, dimensions, head.output_dim); !why.empty()) {
    return InvalidArgument(flag + " " + why);
  }
  return Status::Ok();
}

void FinishEmbedding(int dimensions, bool normalize, PooledOutput* out) {
  if (dimensions > 0 && static_cast<size_t>(dimensions) < out->values.size()) {
    out->values.resize(static_cast<size_t>(dimensions));
  }
  if (normalize) NormalizeRows(out);
}

bool MultiVector(const HeadSpec& head, const PooledOutput& out) {
  return out.rows != 1 || head.pooling == PoolingKind::kAll || head.pooling == PoolingKind::kStep;
}

size_t BestLabel(const PooledOutput& out) {
  size_t best = 0;
  for (size_t k = 1; k < out.values.size(); ++k) {
    if (out.values[k] > out.values[best]) best = k;
  }
  return best;
}

std::vector<size_t> LabelsOverThreshold(const HeadSpec& head, const PooledOutput& out) {
  std::vector<size_t> over;
  if (head.thresholds.empty()) return over;
  for (size_t k = 0; k < out.values.size(); ++k) {
    if (out.values[k] >= head.thresholds[k]) over.push_back(k);
  }
  return over;
}

std::string LabelName(const HeadSpec& head, size_t k) {
  return k < head.labels.size() ? head.labels[k] : std::to_string(k);
}

}  // namespace sluice::io
