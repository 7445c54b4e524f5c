// Typed model configuration read from a Hugging Face model directory:
//   config.json (transformers 4.x and 5.x spellings),
//   sentence-transformers modules.json + module configs (2.x through 6.x type names),
//   an optional sluice.json (calibration, labels, thresholds, activation, instruction).
// All structs are plain values, immutable after loading.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "sluice/status.h"

namespace sluice {

struct ModelConfig {
  std::string dir;
  std::string architecture;  // architectures[0]
  std::string model_type;
  std::optional<DType> dtype;  // torch_dtype (4.x) or dtype (5.x); unset if absent

  int vocab_size = 0;
  int hidden_size = 0;
  int num_hidden_layers = 0;
  int num_attention_heads = 0;
  int num_key_value_heads = 0;  // defaults to num_attention_heads
  int head_dim = 0;             // defaults to hidden_size / num_attention_heads
  int intermediate_size = 0;
  int max_position_embeddings = 0;
  int type_vocab_size = 0;
  std::optional<int> pad_token_id;
  std::optional<int> bos_token_id;
  std::vector<int> eos_token_ids;  // eos_token_id (an integer or a list)
  std::string hidden_act = "gelu";
  double layer_norm_eps = 1e-12;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  std::string rope_type = "default";  // default | linear | llama3 (others refused by models)
  // rope_scaling parameters (linear: factor; llama3: all four).
  double rope_factor = 1.0;
  double rope_low_freq_factor = 1.0;
  double rope_high_freq_factor = 4.0;
  int rope_original_max_position = 0;
  std::string position_embedding_type = "absolute";
  bool attention_bias = false;
  bool mlp_bias = false;  // Llama
  bool tie_word_embeddings = false;
  bool use_sliding_window = false;
  int sliding_window = 0;
  int max_window_layers = 0;             // Qwen2/3: layers from here on slide (if use_...)
  std::vector<std::string> layer_types;  // transformers 5.x: per layer "full_attention" |
                                         // "sliding_attention"

  // Classification heads.
  int num_labels = 2;                 // transformers default when config.json omits it
  std::vector<std::string> id2label;  // index -> label
  std::string problem_type;           // "", single_label_classification, ...
  std::string classifier_activation;  // sentence-transformers CrossEncoder activation_fn

  // Matryoshka embeddings (vLLM's rule): "is_matryoshka": true, or "matryoshka_dimensions"
  // (the dimensions the model was trained for; a list marks the model Matryoshka too).
  bool is_matryoshka = false;
  std::vector<int> matryoshka_dimensions;

  // ModernBERT (transformers 4.48+ and 5.x spellings). Layer l attends globally when
  // l % global_attn_every_n_layers == 0, else within local_attention / 2 positions on each
  // side; global layers rotate with global_rope_theta, local ones with local_rope_theta
  // (layer_types names each layer's type; 5.x rope_parameters holds one theta per type).
  int global_attn_every_n_layers = 0;  // 0 = absent (the model's default, 3, applies)
  int local_attention = 0;             // the whole window, both sides; 0 = absent (128)
  std::optional<double> global_rope_theta, local_rope_theta;
  std::optional<double> norm_eps;  // LayerNorm epsilon of ModernBERT's norms
  bool norm_bias = false;          // LayerNorms with a bias
  bool classifier_bias = false;    // the prediction head's dense layer has a bias
  std::string classifier_pooling;  // sequence classification: "cls" | "mean"
  std::string head_activation;     // the prediction head's activation (config.json
                                   // "classifier_activation" of ModernBERT)

  // Token ids a causal-LM reranker reads at the last position ("yes" and "no").
  // Resolved from sluice.json or the tokenizer by the engine; unset otherwise.
};

// sentence-transformers Pooling module (1_Pooling/config.json).
struct StPooling {
  bool cls = false;
  bool mean = false;
  bool max = false;
  bool mean_sqrt_len = false;
  bool weighted_mean = false;
  bool last_token = false;
  bool include_prompt = true;
};

struct StDense {
  std::string dir;  // module directory (holds model.safetensors)
  int in_features = 0;
  int out_features = 0;
  bool bias = true;
  std::string activation;  // torch.nn.modules.activation.Tanh / Identity / ...
};

struct SentenceTransformersConfig {
  bool present = false;
  std::optional<StPooling> pooling;
  std::vector<StDense> dense;
  bool normalize = false;
  int max_seq_length = 0;
  std::vector<std::string> module_types;  // for `sluice inspect`
  // PyLate's ColBERT settings (config_sentence_transformers.json): query augmentation pads
  // queries with [MASK] to query_length when do_query_expansion (PyLate's default true).
  std::optional<int> query_length;
  bool do_query_expansion = true;
  std::optional<bool> attend_to_expansion_tokens;
  // PyLate's skiplist_words: tokens whose vectors are left out of documents (never queries).
  std::optional<std::vector<std::string>> skiplist_words;
  // PyLate's query_prefix / document_prefix (its "[Q] " / "[D] " tokens) and document_length.
  std::optional<std::string> query_prefix, document_prefix;
  std::optional<int> document_length;
};

// generation_config.json (transformers GenerationConfig): the model's sampling defaults and
// stop tokens. Absent fields keep the values below (transformers' own defaults); an absent
// file is all defaults with `present` false.
struct GenerationConfig {
  bool present = false;
  std::vector<int> eos_token_ids;  // eos_token_id (an integer or a list)
  std::optional<int> bos_token_id, pad_token_id;
  bool do_sample = false;
  double temperature = 1.0;
  double top_p = 1.0;
  int top_k = 50;  // transformers applies it only when do_sample
  double min_p = 0.0;
  double repetition_penalty = 1.0;
  std::optional<int> max_new_tokens;
};
StatusOr<GenerationConfig> LoadGenerationConfig(const std::string& dir);
StatusOr<GenerationConfig> ParseGenerationConfig(std::string_view json, const std::string& origin);

// Optional sluice.json beside the model.
struct SluiceOverrides {
  std::optional<std::string> task;        // embed | classify | score | token-classify
  std::optional<std::string> pooling;     // cls | mean | last | max | all | step
  std::optional<std::string> activation;  // sigmoid | softmax | none
  std::vector<float> calibration_mean;    // per label (or one for all)
  std::vector<float> calibration_std;
  std::vector<std::string> labels;       // overrides id2label
  std::vector<float> thresholds;         // per label, for multi-label outputs
  std::optional<std::string> yes_token;  // causal-LM reranker
  std::optional<std::string> no_token;
  std::optional<int> yes_token_id;
  std::optional<int> no_token_id;
  std::optional<std::string> instruction;  // default instruction for causal rerankers
  std::optional<int> step_token_id;        // STEP pooling
  // Matryoshka, as in config.json (set here for models whose config.json lacks it).
  std::optional<bool> is_matryoshka;
  std::vector<int> matryoshka_dimensions;
  // Embeddings are L2-normalised unless a request says otherwise (`normalize`); default
  // true, as vLLM. Applies to every embedding route and `sluice embed`.
  std::optional<bool> normalize;
  // Late interaction (ColBERT): the model embeds every token (after its Dense projection,
  // each token vector L2-normalised) and scores a (query, document) pair by MaxSim: the
  // sum over query tokens of the best dot product with any document token. Served through
  // /score and /v1/rerank; query_prefix / document_prefix are prepended to the texts.
  // query_prefix / document_prefix, document_length (documents cut to it; 0 = off) over
  // PyLate's config_sentence_transformers.json (LateInteractionTexts).
  bool late_interaction = false;
  std::optional<std::string> query_prefix, document_prefix;
  std::optional<int> document_length;
  // ColBERT query augmentation (late interaction): `query_length` (0 = off) and
  // `attend_to_expansion_tokens`, over PyLate's config_sentence_transformers.json.
  std::optional<int> query_length;
  std::optional<bool> attend_to_expansion_tokens;
  // ColBERT document skiplist (late interaction): the tokens whose vectors are dropped from
  // documents before MaxSim, over PyLate's config_sentence_transformers.json skiplist_words.
  std::optional<std::vector<std::string>> skiplist_words;
  // Aspect-based sentiment (POST /absa) on a token classifier with BIO labels (O, B-X,
  // I-X): `sentiments` maps a tag X to the sentiment it reports (default: X lower-cased),
  // `aggregation` is the word aggregation of the token-classification pipeline used to
  // build spans (first | average | max | simple; default first), `max_aspects` caps the
  // aspects of one request (default 32). `sentiment_model` (a model directory, resolved against
  // this one; empty = none) is a sequence classifier loaded beside the token classifier: each
  // (aspect, review) pair's sentiment is its most probable label (mapped by `sentiments`).
  struct Absa {
    std::vector<std::pair<std::string, std::string>> sentiments;
    std::string sentiment_model;
    std::string aggregation = "first";
    int max_aspects = 32;
  };
  std::optional<Absa> absa;
  // Plugin libraries (docs/plugins.md) the model loads (logits processors of a generation
  // model, IO processors of a scoring model), resolved against the model directory; they come
  // after the --plugin flags and a repository model's model.json "plugins".
  std::vector<std::string> plugins;
};

// Whether `dimensions` (truncated embeddings) may be asked of a model: config.json's
// is_matryoshka / matryoshka_dimensions, overridden by sluice.json's. `dimensions` empty =
// any number of dimensions up to the output.
struct Matryoshka {
  bool enabled = false;
  std::vector<int> dimensions;
};
Matryoshka ResolveMatryoshka(const ModelConfig& config, const SluiceOverrides& overrides);
// Why `dimensions` cannot be asked of a model with `output_dim` values per embedding
// ("must be ..." / "is ..."), or "" when it can.
std::string MatryoshkaDimensionsError(const Matryoshka& m, int64_t dimensions, int output_dim);

// ColBERT query augmentation of a late-interaction model: queries are padded with the mask
// token to `length` tokens (0 = no augmentation), the [MASK] tokens attended by the query's
// other tokens (`attend`) or not (PyLate's default: they attend to the others, no token
// attends to them). sluice.json's query_length / attend_to_expansion_tokens over PyLate's
// config_sentence_transformers.json (query_length when do_query_expansion). An error where it
// cannot be served: asked of a model without late interaction, or a negative length.
struct QueryExpansion {
  int length = 0;
  bool attend = false;
};
StatusOr<QueryExpansion> ResolveQueryExpansion(const SentenceTransformersConfig& st,
                                               const SluiceOverrides& overrides,
                                               bool late_interaction);

// The text settings of a late-interaction model: its query/document prefixes (put before
// text queries and documents) and document_length (text documents cut to that many tokens, as
// PyLate cuts them; 0 = only the model's limit), sluice.json's over PyLate's
// config_sentence_transformers.json; none by default. An error for a negative length.
struct LateInteractionTexts {
  std::string query_prefix, document_prefix;
  int document_length = 0;
};
StatusOr<LateInteractionTexts> ResolveLateInteractionTexts(const SentenceTransformersConfig& st,
                                                           const SluiceOverrides& overrides);

// The document skiplist of a late-interaction model, as PyLate resolves it: sluice.json
// skiplist_words, else config_sentence_transformers.json skiplist_words, else PyLate's default
// (Python's string.punctuation, one word per character). [] = none.
std::vector<std::string> ResolveSkiplistWords(const SentenceTransformersConfig& st,
                                              const SluiceOverrides& overrides);

StatusOr<ModelConfig> LoadModelConfig(const std::string& dir);
StatusOr<ModelConfig> ParseModelConfig(std::string_view json, const std::string& origin);
StatusOr<SentenceTransformersConfig> LoadSentenceTransformersConfig(const std::string& dir);
StatusOr<SluiceOverrides> LoadSluiceOverrides(const std::string& dir);

}  // namespace sluice
