// vLLM /tokenize and /detokenize (no engine work: PreProcess builds no sequences).
#include "io/builtins.h"
#include "io/inputs.h"
#include "tokenizer/tokenizer.h"

namespace sluice::io {
namespace {

struct TokenizeState : IoState {
  std::string text;
  std::vector<int32_t> ids;
  bool add_special_tokens = true;
  bool return_token_strs = false;
};

class TokenizeProcessor : public IoProcessor {
 public:
  explicit TokenizeProcessor(bool detokenize) : detokenize_(detokenize) {}
  std::string_view name() const override { return detokenize_ ? "detokenize" : "tokenize"; }

  StatusOr<std::unique_ptr<IoState>> Parse(const IoRequest& req) const override {
    const ModelContext& m = *req.model;
    ASSIGN_OR_RETURN(simdjson::dom::object obj, ParseObject(req.body));
    Fields f(obj, "");
    auto st = std::make_unique<TokenizeState>();
    std::string model;
    RETURN_IF_ERROR(f.GetString("model", &model));
    RETURN_IF_ERROR(CheckModelName(m, model));
    simdjson::dom::element e;
    if (detokenize_) {
      simdjson::dom::array a;
      if (!f.Get("tokens", &e)) return FieldError("tokens", "is required");
      if (e.get(a)) return FieldError("tokens", "must be a list of token ids");
      RETURN_IF_ERROR(ReadIds(a, "tokens", &st->ids));
    } else {
      RETURN_IF_ERROR(f.GetString("prompt", &st->text));
      if (!f.Get("prompt", &e)) return FieldError("prompt", "is required");
      RETURN_IF_ERROR(f.GetBool("add_special_tokens", &st->add_special_tokens));
      RETURN_IF_ERROR(f.GetBool("return_token_strs", &st->return_token_strs));
    }
    RETURN_IF_ERROR(f.CheckNoUnknown());
    if (!m.tokenizer) {
      return FailedPrecondition("this model has no tokenizer (tokenizer.json)");
    }
    return std::unique_ptr<IoState>(std::move(st));
  }

  Status PreProcess(const ModelContext&, IoState&, std::vector<TokenSequence>*) const override {
    return Status::Ok();
  }

  StatusOr<IoResponse> PostProcess(const ModelContext& m, IoState& state,
                                   std::vector<PooledOutput>&) const override {
    auto& st = static_cast<TokenizeState&>(state);
    JsonWriter w;
    w.BeginObject();
    if (detokenize_) {
      auto text = m.tokenizer->Decode(st.ids, true);
      if (!text.ok())
        return FieldError("tokens", "could not be decoded: " + text.status().message());
      w.Key("prompt");
      w.String(*text);
    } else {
      auto enc = m.tokenizer->Encode(st.text, st.add_special_tokens);
      if (!enc.ok())
        return FieldError("prompt", "could not be tokenised: " + enc.status().message());
      w.Key("count");
      w.Int(static_cast<int64_t>(enc->ids.size()));
      w.Key("max_model_len");
      w.Int(m.model_max_tokens);
      w.Key("tokens");
      w.Ints(enc->ids);
      if (st.return_token_strs) {
        w.Key("token_strs");
        w.BeginArray();
        for (const auto& t : enc->tokens) w.String(t);
        w.EndArray();
      }
    }
    w.EndObject();
    return IoResponse{w.Take()};
  }

 private:
  bool detokenize_;
};

}  // namespace

std::unique_ptr<IoProcessor> MakeTokenizeProcessor(bool detokenize) {
  return std::make_unique<TokenizeProcessor>(detokenize);
}

}  // namespace sluice::io
