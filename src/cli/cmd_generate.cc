// `sluice generate --model DIR --input prompts.jsonl [--output out.jsonl]`: offline
// generation (docs/cli.md). An input line is {"prompt": "..."} or {"prompt_token_ids": [...]}
// with SamplingParams fields named as in vLLM; an output line per completion carries
// index, completion, token_ids, text, finish_reason (stop_reason when a stop token or string
// ended it), logprobs as [{token_id: logprob}] per step and prompt_logprobs when asked.
// All requests are submitted at once; a progress line shows requests and output tokens/s,
// and a summary gives TTFT and inter-token latency percentiles.
#include <algorithm>
#include <fstream>
#include <iostream>

#include "cli/command.h"
#include "cli/common.h"
#include "cli/serve_generate.h"
#include "core/log.h"
#include "engine/generator.h"
#include "io/json.h"
#include "io/sampling_json.h"
#include "io/structured_json.h"
#include "tokenizer/tokenizer.h"

namespace sluice::cli {
namespace {

struct GenerateFlags {
  std::string model, input, output = "-";
  std::string dtype = "auto", device = "cpu", residual_dtype = "f32";
  int threads = 0;
  int max_model_len = 0;
  int64_t max_num_batched_tokens = 0;
  int max_num_seqs = 0;
  int64_t kv_cache_memory = 0;
  double gpu_memory_utilization = 0;  // 0: not given (0.9 on CUDA without --kv-cache-memory)
  std::string prefix_caching = "on";
  std::string cuda_graphs = "auto";  // auto: on with CUDA
  bool batch_invariant = false;
  bool profile = false;
  std::vector<std::string> plugins;
  int logits_threads = 0;
  int64_t structured_cache_mb = 1024;
};

StatusOr<GenerationOptions> ToOptions(const GenerateFlags& f) {
  ModelFlags mf;  // dtype / device / threads / residual dtype: the same rules as the others
  mf.model = f.model;
  mf.dtype = f.dtype;
  mf.device = f.device;
  mf.threads = f.threads;
  mf.residual_dtype = f.residual_dtype;
  mf.batch_invariant = f.batch_invariant;
  ASSIGN_OR_RETURN(EngineOptions eo, ToEngineOptions(mf));
  GenerationOptions o;
  o.dtype = eo.dtype;
  o.backend = eo.backend;
  o.activation_residual = eo.activation_residual;
  o.profile = f.profile;
  o.max_model_len = f.max_model_len;
  o.max_num_batched_tokens = f.max_num_batched_tokens;
  o.max_num_seqs = f.max_num_seqs;
  o.kv_cache_memory = f.kv_cache_memory;
  ASSIGN_OR_RETURN(
      o.gpu_memory_utilization,
      ResolveGpuMemoryUtilization(f.gpu_memory_utilization, o.backend.device, f.kv_cache_memory));
  if (f.prefix_caching != "on" && f.prefix_caching != "off") {
    return InvalidArgument("--enable-prefix-caching: expected on or off, got \"" +
                           f.prefix_caching + "\"");
  }
  o.prefix_caching = f.prefix_caching == "on";
  if (f.cuda_graphs != "auto" && f.cuda_graphs != "on" && f.cuda_graphs != "off") {
    return InvalidArgument("--cuda-graphs: expected auto, on or off, got \"" + f.cuda_graphs +
                           "\"");
  }
  if (f.cuda_graphs == "on" && o.backend.device != DeviceKind::kCuda) {
    return InvalidArgument("--cuda-graphs on needs --device cuda");
  }
  o.cuda_graphs =
      f.cuda_graphs == "on" || (f.cuda_graphs == "auto" && o.backend.device == DeviceKind::kCuda);
  if (f.logits_threads < 0) return InvalidArgument("--logits-threads must be >= 0");
  o.logits_threads = f.logits_threads;
  if (f.structured_cache_mb < 1) return InvalidArgument("--structured-cache-mb must be >= 1");
  o.structured_cache_bytes = static_cast<size_t>(f.structured_cache_mb) << 20;
  return o;
}

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(q * (v.size() - 1) + 0.5));
  return v[i];
}

void WriteLogprobs(io::JsonWriter& w, int32_t token, const TokenLogprobs& lp) {
  w.BeginObject();
  w.KeyFloat(std::to_string(token), lp.logprob);
  for (const auto& [id, v] : lp.top) {
    if (id != token) w.KeyFloat(std::to_string(id), v);
  }
  w.EndObject();
}

int RunGenerate(const GenerateFlags& f) {
  auto opt = ToOptions(f);
  if (!opt.ok()) return ReportError(opt.status());
  const double t0 = NowSeconds();
  auto bundle = LoadModelBundle(f.model);
  if (!bundle.ok()) return ReportError(bundle.status());
  const ModelBundle& b = **bundle;
  auto plugins = LoadModelPlugins(f.plugins, b);
  if (!plugins.ok()) return ReportError(plugins.status());
  opt->plugins = *plugins;
  auto gen_or = Generator::Load(*bundle, *opt);
  if (!gen_or.ok()) return ReportError(gen_or.status());
  Generator& gen = **gen_or;
  const GenerationOptions& o = gen.options();
  SLUICE_LOG_INFO("model {}: {} ({} params, {} layers, hidden {}), task generate", b.dir,
                  b.arch->name, b.weights->TotalParameters(), b.config.num_hidden_layers,
                  b.config.hidden_size);
  SLUICE_LOG_INFO("dtype {} (checkpoint {}), device {}", DTypeName(gen.runner().compute_dtype()),
                  DTypeName(gen.runner().checkpoint_dtype()), gen.runner().backend().Describe());
  SLUICE_LOG_INFO(
      "limits: max_model_len {}, max_num_batched_tokens {}, max_num_seqs {}; stop tokens {}",
      o.max_model_len, o.max_num_batched_tokens, o.max_num_seqs, gen.stop_token_ids().size());
  SLUICE_LOG_INFO("loaded in {:.2f} s", NowSeconds() - t0);

  // Read every line first: a bad line stops the run before anything is generated.
  std::vector<std::shared_ptr<GenerateRequest>> reqs;
  Status read = ForEachJsonLine(
      f.input, "input", [&](size_t lineno, const std::string&, simdjson::dom::element doc) {
        const std::string where = f.input + ":" + std::to_string(lineno) + ": ";
        simdjson::dom::object obj;
        if (doc.get(obj)) return InvalidArgument(where + "each line must be a JSON object");
        io::Fields fields(obj, "");
        auto r = std::make_shared<GenerateRequest>();
        r->id = std::to_string(reqs.size());
        std::string prompt;
        Status st = fields.GetString("prompt", &prompt);
        simdjson::dom::element ids;
        const bool has_ids = fields.Get("prompt_token_ids", &ids);
        if (st.ok() && has_ids == !prompt.empty()) {
          st = InvalidArgument("give exactly one of \"prompt\" (text) or \"prompt_token_ids\"");
        }
        if (st.ok() && has_ids) {
          simdjson::dom::array arr;
          if (ids.get(arr)) {
            st = InvalidArgument("\"prompt_token_ids\" must be a list of token ids");
          } else {
            for (auto x : arr) {
              int64_t v;
              if (x.get(v) || v < 0 || v > INT32_MAX) {
                st = InvalidArgument("\"prompt_token_ids\" must be a list of token ids");
                break;
              }
              r->prompt.push_back(static_cast<int32_t>(v));
            }
          }
        }
        if (st.ok() && !prompt.empty()) {
          if (!b.tokenizer) {
            st = InvalidArgument(
                "a text prompt needs the model's tokenizer; give "
                "\"prompt_token_ids\" instead");
          } else {
            auto enc = b.tokenizer->Encode(prompt, true);
            if (!enc.ok()) {
              st = enc.status();
            } else {
              r->prompt = std::move(enc->ids);
            }
          }
        }
        if (st.ok()) st = io::ReadSamplingFields(fields, &r->params);
        if (st.ok()) st = io::ReadStructuredFields(fields, &r->params);
        if (st.ok()) st = fields.CheckNoUnknown();
        if (st.ok()) st = gen.Add(r);  // admission: the request's limits and fields
        if (!st.ok()) return Status(st.code(), where + st.message());
        reqs.push_back(std::move(r));
        return Status::Ok();
      });
  if (!read.ok()) return ReportError(read);

  ProgressBar bar("requests", reqs.size());
  const double start = NowSeconds();
  while (gen.HasWork()) {
    if (Status s = gen.Step(); !s.ok()) return ReportError(s);
    bar.Update(gen.stats().requests_finished, gen.stats().generated_tokens);
  }
  const double wall = NowSeconds() - start;
  bar.Finish(reqs.size(), gen.stats().generated_tokens);

  std::vector<double> ttft, itl;
  for (const auto& r : reqs) {
    for (const CompletionOutput& c : r->outputs) {
      if (!c.token_times.empty()) ttft.push_back(c.token_times.front());
      for (size_t i = 1; i < c.token_times.size(); ++i) {
        itl.push_back(c.token_times[i] - c.token_times[i - 1]);
      }
    }
  }
  const GenerationStats& st = gen.stats();
  const PrefixCacheStats& pc = gen.blocks().stats();
  std::fprintf(stderr,
               "generated %lld tokens for %zu requests in %.3f s: %.1f output tokens/s; "
               "prompt tokens computed %lld; TTFT p50 %.1f ms p99 %.1f ms; inter-token "
               "latency p50 %.2f ms p99 %.2f ms; %lld steps, %lld preemptions; prefix cache "
               "hits %lld of %lld tokens\n",
               static_cast<long long>(st.generated_tokens), reqs.size(), wall,
               st.generated_tokens / std::max(wall, 1e-9), static_cast<long long>(st.prompt_tokens),
               1e3 * Percentile(ttft, 0.5), 1e3 * Percentile(ttft, 0.99),
               1e3 * Percentile(itl, 0.5), 1e3 * Percentile(itl, 0.99),
               static_cast<long long>(st.steps), static_cast<long long>(st.preemptions),
               static_cast<long long>(pc.hits), static_cast<long long>(pc.queries));
  const double per = 1e6 / static_cast<double>(std::max<int64_t>(st.steps, 1));
  std::fprintf(stderr,
               "step phases (mean per step): prepare %.1f us, launch %.1f us, wait for the "
               "device %.1f us, apply %.1f us\n",
               st.prepare_s * per, st.launch_s * per, st.wait_s * per, st.apply_s * per);
  if (st.logits_masks > 0) {
    const double step_s = st.prepare_s + st.launch_s + st.wait_s + st.apply_s;
    std::fprintf(stderr,
                 "logits processors: %.1f us per step (%.2f%% of the step time), %lld masks\n",
                 st.logits_s * per, 100.0 * st.logits_s / std::max(step_s, 1e-12),
                 static_cast<long long>(st.logits_masks));
    std::fprintf(stderr,
                 "masks outlasted the forward in %lld of %lld steps with masks (%.1f ms of "
                 "filling in those steps)\n",
                 static_cast<long long>(st.mask_bound_steps), static_cast<long long>(st.mask_steps),
                 1e3 * st.mask_bound_s);
  }
  const int64_t total = gen.backend().DeviceMemoryTotal();
  if (total > 0) {
    std::fprintf(
        stderr, "device memory in use at the end: %lld MiB of %lld MiB; KV cache %lld MiB\n",
        static_cast<long long>((total - gen.backend().DeviceMemoryFree()) >> 20),
        static_cast<long long>(total >> 20), static_cast<long long>(gen.kv_cache_bytes() >> 20));
  }
  std::fprintf(
      stderr,
      "KV blocks: %d of %d in use at the end, %d cached; decode steps from CUDA graphs: %lld\n",
      gen.blocks().in_use(), gen.blocks().num_blocks(), gen.blocks().cached(),
      static_cast<long long>(gen.runner().decode_graph_steps()));
  if (f.profile) std::fprintf(stderr, "%s", gen.runner().ProfileReport().c_str());

  std::ofstream file;
  std::ostream* os = &std::cout;
  if (f.output != "-") {
    file.open(f.output);
    if (!file) return ReportError(NotFound("cannot write " + f.output));
    os = &file;
  }
  for (size_t i = 0; i < reqs.size(); ++i) {
    const GenerateRequest& r = *reqs[i];
    for (size_t c = 0; c < r.outputs.size(); ++c) {
      const CompletionOutput& out = r.outputs[c];
      io::JsonWriter w;
      w.BeginObject();
      w.KeyInt("index", static_cast<int64_t>(i));
      w.KeyInt("completion", static_cast<int64_t>(c));
      w.KeyInt("prompt_tokens", static_cast<int64_t>(r.prompt.size()));
      w.Key("token_ids");
      w.Ints(out.token_ids);
      if (r.params.detokenize && b.tokenizer) w.KeyString("text", out.text);
      w.KeyString("finish_reason", out.finish_reason);
      if (out.stop_token) {
        w.KeyInt("stop_reason", *out.stop_token);
      } else if (out.stop_string) {
        w.KeyString("stop_reason", *out.stop_string);
      }
      if (r.params.logprobs) {
        w.Key("logprobs");
        w.BeginArray();
        for (size_t k = 0; k < out.logprobs.size(); ++k) {
          WriteLogprobs(w, out.token_ids[k], out.logprobs[k]);
        }
        w.EndArray();
      }
      if (r.params.prompt_logprobs && c == 0) {
        w.Key("prompt_logprobs");
        w.BeginArray();
        w.Null();  // the first prompt token has no logprob
        for (size_t k = 0; k < r.prompt_logprobs.size(); ++k) {
          WriteLogprobs(w, r.prompt[k + 1], r.prompt_logprobs[k]);
        }
        w.EndArray();
      }
      w.EndObject();
      *os << w.str() << '\n';
    }
  }
  return 0;
}

Registrar generate_cmd(Command{
    "generate", "Generate completions for prompts from a JSONL file (offline)", [](CLI::App* sub) {
      auto f = std::make_shared<GenerateFlags>();
      sub->add_option("--model", f->model, "model directory")->required();
      sub->add_option("--input", f->input,
                      "JSONL: {\"prompt\": ...} or {\"prompt_token_ids\": [...]} plus sampling "
                      "fields named as in vLLM")
          ->required();
      sub->add_option("--output", f->output, "output JSONL (- = stdout)")->capture_default_str();
      sub->add_option("--dtype", f->dtype, "auto | float32 | bfloat16 | float16")
          ->capture_default_str();
      sub->add_option("--device", f->device, "cpu | cuda[:N]")->capture_default_str();
      sub->add_option("--threads", f->threads, "CPU threads (0 = all cores)")
          ->capture_default_str();
      sub->add_option("--residual-dtype", f->residual_dtype, "f32 | activation")
          ->capture_default_str();
      sub->add_option("--max-model-len", f->max_model_len,
                      "prompt + output tokens per sequence at most (0 = the model's "
                      "max_position_embeddings)")
          ->capture_default_str();
      sub->add_option("--max-num-batched-tokens", f->max_num_batched_tokens,
                      "tokens per step at most (decode tokens plus prompt chunks; 0 = 2048 "
                      "on CPU, 16384 on CUDA)")
          ->capture_default_str();
      sub->add_option("--max-num-seqs", f->max_num_seqs,
                      "sequences per step at most (0 = 64 on CPU, 512 on CUDA)")
          ->capture_default_str();
      sub->add_option("--kv-cache-memory", f->kv_cache_memory,
                      "KV cache bytes (0 = --gpu-memory-utilization on CUDA, 2 GiB on CPU)")
          ->capture_default_str();
      sub->add_option("--gpu-memory-utilization", f->gpu_memory_utilization,
                      "CUDA without --kv-cache-memory: fraction of the device's memory in use at "
                      "most once the KV cache is allocated (default 0.9)");
      sub->add_option("--enable-prefix-caching", f->prefix_caching,
                      "on | off: reuse the KV blocks of prompt prefixes computed before")
          ->capture_default_str();
      sub->add_option("--cuda-graphs", f->cuda_graphs,
                      "auto | on | off: replay decode steps from CUDA graphs recorded at load "
                      "(auto: on with CUDA; off is vLLM's --enforce-eager)")
          ->capture_default_str();
      sub->add_flag("--batch-invariant", f->batch_invariant,
                    "CUDA: a request's tokens independent of the batch around it (alone, "
                    "batched, chunked or after preemption); slower. CPU generation is batch "
                    "invariant without it");
      sub->add_flag("--profile", f->profile, "time every backend op and print a breakdown");
      sub->add_option("--plugin", f->plugins,
                      "a plugin library (docs/plugins.md) whose logits processors requests may "
                      "name (repeatable)");
      sub->add_option("--logits-threads", f->logits_threads,
                      "threads filling logits-processor masks (0 = hardware threads, at most 16)")
          ->capture_default_str();
      sub->add_option("--structured-cache-mb", f->structured_cache_mb,
                      "structured outputs: MiB of token masks cached over all compiled "
                      "constraints (the least recently used constraints are dropped past it)")
          ->capture_default_str();
      return std::function<int()>([f] { return RunGenerate(*f); });
    }});

}  // namespace
}  // namespace sluice::cli
