// `sluice bench`: an HTTP load generator for a running `sluice serve` (or any server with
// the same routes): C concurrent keep-alive clients send synthetic token-id requests, or
// the request bodies of a JSONL file (--input, one body per line, sent in file order and
// cycled), for a number of requests or a duration; prints throughput, latency
// percentiles and errors. --grpc-model NAME sends the same synthetic rerank requests as KServe
// v2 gRPC ModelInfer calls (query_ids / document_ids INT64) to the gRPC port instead.
#include <algorithm>
#include <atomic>
// GCC 12 at -O2 reports a false -Wmaybe-uninitialized inside Beast's parser (boost::optional).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#pragma GCC diagnostic pop
#include <grpcpp/grpcpp.h>
#include <simdjson.h>

#include <chrono>
#include <cstdio>
#include <limits>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>

#include "cli/command.h"
#include "cli/common.h"
#include "grpc_service.grpc.pb.h"

namespace sluice::cli {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

struct BenchFlags {
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string endpoint = "/v1/rerank";
  int concurrency = 16;
  int requests = 1000;
  double duration_s = 0;  // > 0: run for this long instead of a request count
  int documents = 20;
  int query_tokens = 16;
  int doc_tokens = 100;
  int vocab = 200;  // token ids drawn from [5, vocab)
  std::string api_key;
  unsigned seed = 1;
  std::string input;  // JSONL of request bodies (instead of synthetic ones)
  // Generation (/v1/completions): lengths "A" or "A:B" (uniform in [A, B]), a Poisson
  // request rate (0 = closed loop: each client sends its next request when one finishes).
  std::string prompt_tokens = "128", output_tokens = "128";
  double request_rate = 0;
  std::string grpc_model;       // KServe v2 gRPC ModelInfer to this model (--port: the gRPC port)
  std::string latency_log;      // each ok request's start (Unix seconds) and latency (seconds)
  std::set<std::string> given;  // the flags given on the command line
};

bool IsGeneration(const BenchFlags& f) { return f.endpoint == "/v1/completions"; }

// "A" or "A:B".
bool ParseRange(const std::string& s, int* lo, int* hi) {
  const size_t c = s.find(':');
  try {
    *lo = std::stoi(s.substr(0, c));
    *hi = c == std::string::npos ? *lo : std::stoi(s.substr(c + 1));
  } catch (...) {
    return false;
  }
  return *lo >= 1 && *hi >= *lo;
}

// Request bodies from --input, with the number of inputs (documents) each carries.
struct Bodies {
  std::vector<std::string> bodies;
  std::vector<int> inputs;
};

// Counts a body's inputs: the length of its documents/texts/text_2/input/inputs/aspects list.
int CountInputs(simdjson::dom::element doc) {
  for (const char* k : {"documents", "texts", "text_2", "input", "inputs", "aspects"}) {
    simdjson::dom::array a;
    if (!doc[k].get(a)) {
      if (a.size() > 0 && (a.at(0).is_int64() || a.at(0).is_uint64())) return 1;  // one id list
      return static_cast<int>(a.size());
    }
    simdjson::dom::element e;
    if (!doc[k].get(e)) return 1;
  }
  return 1;
}

StatusOr<Bodies> ReadBodies(const std::string& path) {
  Bodies b;
  RETURN_IF_ERROR(ForEachJsonLine(
      path, "--input",
      [&](size_t lineno, const std::string& line, simdjson::dom::element doc) -> Status {
        if (!doc.is_object()) {
          return InvalidArgument(path + ":" + std::to_string(lineno) + ": not a JSON object");
        }
        b.inputs.push_back(CountInputs(doc));
        b.bodies.push_back(line);
        return Status::Ok();
      }));
  if (b.bodies.empty()) return InvalidArgument("--input " + path + " holds no request bodies");
  return b;
}

std::string Ids(std::mt19937& rng, int n, int vocab) {
  std::uniform_int_distribution<int> d(5, std::max(6, vocab) - 1);
  std::string s = "[";
  for (int i = 0; i < n; ++i) {
    if (i) s += ',';
    s += std::to_string(d(rng));
  }
  return s + "]";
}

StatusOr<std::string> MakeBody(const BenchFlags& f, std::mt19937& rng) {
  std::string docs = "[";
  for (int i = 0; i < f.documents; ++i) {
    if (i) docs += ',';
    docs += Ids(rng, f.doc_tokens, f.vocab);
  }
  docs += "]";
  const std::string q = Ids(rng, f.query_tokens, f.vocab);
  const std::string& e = f.endpoint;
  if (e == "/v1/rerank" || e == "/rerank")
    return R"({"query":)" + q + R"(,"documents":)" + docs + "}";
  if (e == "/score" || e == "/v1/score") return R"({"text_1":)" + q + R"(,"text_2":)" + docs + "}";
  if (e == "/v1/embeddings" || e == "/pooling" || e == "/classify")
    return R"({"input":)" + docs + "}";
  if (e == "/embed" || e == "/predict") return R"({"inputs":)" + docs + "}";
  if (e.rfind("/v2/models/", 0) == 0 && e.size() > 17 && e.substr(e.size() - 6) == "/infer") {
    // KServe v2 over HTTP: the same token ids as INT64 tensors.
    std::string flat = docs.substr(1, docs.size() - 2);
    std::string dflat;
    for (char ch : flat) {
      if (ch != '[' && ch != ']') dflat += ch;
    }
    return R"({"inputs":[{"name":"query_ids","datatype":"INT64","shape":[1,)" +
           std::to_string(f.query_tokens) + R"(],"data":)" + q +
           R"(},{"name":"document_ids","datatype":"INT64","shape":[)" +
           std::to_string(f.documents) + "," + std::to_string(f.doc_tokens) + R"(],"data":[)" +
           dflat + "]}]}";
  }
  if (IsGeneration(f)) {
    int plo, phi, olo, ohi;
    if (!ParseRange(f.prompt_tokens, &plo, &phi) || !ParseRange(f.output_tokens, &olo, &ohi)) {
      return InvalidArgument("--prompt-tokens / --output-tokens: expected N or A:B, A >= 1");
    }
    const int pn = std::uniform_int_distribution<int>(plo, phi)(rng);
    const int on = std::uniform_int_distribution<int>(olo, ohi)(rng);
    return R"({"prompt":)" + Ids(rng, pn, f.vocab) + R"(,"max_tokens":)" + std::to_string(on) +
           R"(,"temperature":0,"ignore_eos":true,"logprobs":0,"stream":true,)"
           R"("stream_options":{"include_usage":true}})";
  }
  return InvalidArgument("--endpoint: no synthetic body for " + e);
}

struct Shared {
  std::mutex mu;
  std::vector<double> latencies;
  std::vector<double> starts;  // --latency-log: each latency's request start (NowSeconds)
  std::map<std::string, int> errors;
  std::atomic<int> issued{0}, done{0};
  std::atomic<int64_t> inputs_ok{0};
  const Bodies* bodies = nullptr;  // --input
  std::atomic<size_t> next_body{0};
  // Generation: time to first token, inter-token gaps (between content events), output
  // tokens (the usage event), and the Poisson arrival schedule.
  std::vector<double> ttft, itl;
  std::atomic<int64_t> output_tokens{0};
  double next_arrival = 0;
  std::mt19937 arrival_rng{12345};
};

// A streamed completion: sends the body, reads the server-sent events as they arrive.
// Returns false on an I/O error (the connection is then dropped).
bool StreamCompletion(beast::tcp_stream& stream, beast::flat_buffer& buf,
                      http::request<http::string_body>& req, double t0, Shared* sh, int* status,
                      std::string* error) {
  beast::error_code ec;
  http::write(stream, req, ec);
  if (ec) return *error = "io: " + ec.message(), false;
  http::response_parser<http::string_body> p;
  p.body_limit(std::numeric_limits<std::uint64_t>::max());
  http::read_header(stream, buf, p, ec);
  if (ec) return *error = "io: " + ec.message(), false;
  *status = p.get().result_int();
  size_t scanned = 0;
  double last = -1, first = -1;
  std::vector<double> gaps;
  int64_t tokens = 0;
  bool done_seen = false;
  simdjson::dom::parser json;
  while (!p.is_done()) {
    http::read_some(stream, buf, p, ec);
    if (ec) return *error = "io: " + ec.message(), false;
    const double now = NowSeconds();
    const std::string& body = p.get().body();
    size_t end;
    while (*status == 200 && (end = body.find("\n\n", scanned)) != std::string::npos) {
      std::string_view ev(body.data() + scanned, end - scanned);
      scanned = end + 2;
      if (ev.rfind("data: ", 0) != 0) continue;
      ev.remove_prefix(6);
      if (ev == "[DONE]") {
        done_seen = true;
        continue;
      }
      simdjson::dom::element doc;
      if (json.parse(ev.data(), ev.size()).get(doc)) continue;
      simdjson::dom::array choices;
      int64_t completion = 0;
      if (!doc["usage"]["completion_tokens"].get(completion)) tokens += completion;
      if (doc["choices"].get(choices) || choices.size() == 0) continue;
      if (first < 0) first = now;
      if (last >= 0) gaps.push_back(now - last);
      last = now;
    }
  }
  if (*status == 200 && !done_seen) return *error = "stream ended without [DONE]", false;
  if (*status == 200) {
    sh->output_tokens += tokens;
    std::lock_guard<std::mutex> lock(sh->mu);
    if (first >= 0) sh->ttft.push_back(first - t0);
    sh->itl.insert(sh->itl.end(), gaps.begin(), gaps.end());
  }
  if (!p.get().keep_alive()) *error = "close";
  return true;
}

void Client(const BenchFlags& f, int index, double deadline, Shared* sh) {
  std::mt19937 rng(f.seed * 7919 + index);
  net::io_context ioc;
  std::optional<beast::tcp_stream> stream;
  beast::flat_buffer buf;
  auto fail = [&](const std::string& what) {
    std::lock_guard<std::mutex> lock(sh->mu);
    sh->errors[what]++;
  };
  for (;;) {
    if (f.duration_s > 0 ? NowSeconds() >= deadline : sh->issued++ >= f.requests) break;
    int inputs = f.documents;
    StatusOr<std::string> body = std::string();
    if (sh->bodies) {
      const size_t k = sh->next_body++ % sh->bodies->bodies.size();
      body = sh->bodies->bodies[k];
      inputs = sh->bodies->inputs[k];
    } else {
      body = MakeBody(f, rng);
    }
    if (!body.ok()) return fail(body.status().message());
    if (f.request_rate > 0) {  // Poisson arrivals: wait for this request's arrival time
      double at;
      {
        std::lock_guard<std::mutex> lock(sh->mu);
        sh->next_arrival += std::exponential_distribution<double>(f.request_rate)(sh->arrival_rng);
        at = sh->next_arrival;
      }
      const double wait = at - NowSeconds();
      if (wait > 0) std::this_thread::sleep_for(std::chrono::duration<double>(wait));
    }
    if (IsGeneration(f) && body->find("\"stream\"") == std::string::npos) {
      body->insert(body->size() - 1, R"(,"stream":true,"stream_options":{"include_usage":true})");
    }
    http::request<http::string_body> req{http::verb::post, f.endpoint, 11};
    req.set(http::field::host, f.host);
    req.set(http::field::content_type, "application/json");
    if (!f.api_key.empty()) req.set(http::field::authorization, "Bearer " + f.api_key);
    req.body() = std::move(*body);
    req.keep_alive(true);
    req.prepare_payload();
    const double t0 = NowSeconds();
    beast::error_code ec;
    if (!stream) {
      stream.emplace(ioc);
      tcp::resolver resolver(ioc);
      auto results = resolver.resolve(f.host, std::to_string(f.port), ec);
      if (!ec) stream->connect(results, ec);
      if (ec) {
        stream.reset();
        fail("connect: " + ec.message());
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        continue;
      }
      stream->socket().set_option(tcp::no_delay(true));
    }
    if (IsGeneration(f)) {
      int status = 0;
      std::string error;
      const bool ok = StreamCompletion(*stream, buf, req, t0, sh, &status, &error);
      if (!ok) {
        stream.reset();
        buf.clear();
        fail(error);
        continue;
      }
      sh->done++;
      if (status != 200) {
        fail("HTTP " + std::to_string(status));
      } else {
        sh->inputs_ok += 1;
        std::lock_guard<std::mutex> lock(sh->mu);
        sh->latencies.push_back(NowSeconds() - t0);
      }
      if (error == "close") stream.reset();
      continue;
    }
    http::response<http::string_body> res;
    http::write(*stream, req, ec);
    if (!ec) http::read(*stream, buf, res, ec);
    if (ec) {
      stream.reset();
      buf.clear();
      fail("io: " + ec.message());
      continue;
    }
    const double t1 = NowSeconds();
    sh->done++;
    if (res.result_int() != 200) {
      fail("HTTP " + std::to_string(res.result_int()));
    } else {
      sh->inputs_ok += inputs;
      std::lock_guard<std::mutex> lock(sh->mu);
      sh->latencies.push_back(t1 - t0);
      sh->starts.push_back(t0);
    }
    if (!res.keep_alive()) stream.reset();
  }
}

// --grpc-model: one channel (its own connection) per client, synchronous ModelInfer calls.
void GrpcClient(const BenchFlags& f, int index, double deadline, Shared* sh) {
  std::mt19937 rng(f.seed * 7919 + index);
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetMaxReceiveMessageSize(-1);
  auto channel = grpc::CreateCustomChannel(f.host + ":" + std::to_string(f.port),
                                           grpc::InsecureChannelCredentials(), args);
  auto stub = inference::GRPCInferenceService::NewStub(channel);
  std::uniform_int_distribution<int> d(5, std::max(6, f.vocab) - 1);
  auto fail = [&](const std::string& what) {
    std::lock_guard<std::mutex> lock(sh->mu);
    sh->errors[what]++;
  };
  for (;;) {
    if (f.duration_s > 0 ? NowSeconds() >= deadline : sh->issued++ >= f.requests) break;
    inference::ModelInferRequest req;
    req.set_model_name(f.grpc_model);
    auto* di = req.add_inputs();  // documents first: the HTTP bodies' order of draws
    di->set_name("document_ids");
    di->set_datatype("INT64");
    di->add_shape(f.documents);
    di->add_shape(f.doc_tokens);
    for (int i = 0; i < f.documents * f.doc_tokens; ++i) {
      di->mutable_contents()->add_int64_contents(d(rng));
    }
    auto* qi = req.add_inputs();
    qi->set_name("query_ids");
    qi->set_datatype("INT64");
    qi->add_shape(1);
    qi->add_shape(f.query_tokens);
    for (int i = 0; i < f.query_tokens; ++i) qi->mutable_contents()->add_int64_contents(d(rng));
    grpc::ClientContext ctx;
    if (!f.api_key.empty()) ctx.AddMetadata("authorization", "Bearer " + f.api_key);
    inference::ModelInferResponse resp;
    const double t0 = NowSeconds();
    const grpc::Status st = stub->ModelInfer(&ctx, req, &resp);
    const double t1 = NowSeconds();
    sh->done++;
    if (!st.ok()) {
      fail("gRPC " + std::to_string(static_cast<int>(st.error_code())) + ": " + st.error_message());
      continue;
    }
    sh->inputs_ok += f.documents;
    std::lock_guard<std::mutex> lock(sh->mu);
    sh->latencies.push_back(t1 - t0);
    sh->starts.push_back(t0);
  }
}

double Percentile(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  const size_t k = std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5));
  std::nth_element(v.begin(), v.begin() + k, v.end());
  return v[k];
}

// Flags that shape what this run does not send are refused, naming them.
Status CheckBenchFlags(const BenchFlags& f) {
  auto named = [&](std::initializer_list<const char*> names) {
    std::string out;
    for (const char* n : names) {
      if (f.given.count(n)) out += (out.empty() ? "" : ", ") + std::string(n);
    }
    return out;
  };
  if (f.given.count("--requests") && f.given.count("--duration")) {
    return InvalidArgument("--requests and --duration: give one (a count or a time)");
  }
  if (!f.input.empty()) {
    if (std::string n = named({"--documents", "--query-tokens", "--doc-tokens", "--vocab",
                               "--prompt-tokens", "--output-tokens", "--grpc-model"});
        !n.empty()) {
      return InvalidArgument(n + ": shape synthetic requests; --input sends its file's bodies");
    }
    if (f.given.count("--seed") && f.request_rate <= 0) {
      return InvalidArgument(
          "--seed: draws synthetic requests and Poisson arrivals; with --input and no "
          "--request-rate there is nothing to draw");
    }
  }
  if (!f.grpc_model.empty() && f.given.count("--endpoint")) {
    return InvalidArgument("--endpoint: --grpc-model sends KServe v2 gRPC ModelInfer calls");
  }
  if (IsGeneration(f)) {
    if (std::string n = named({"--documents", "--query-tokens", "--doc-tokens", "--latency-log"});
        !n.empty()) {
      return InvalidArgument(n +
                             ": not for /v1/completions (its requests: --prompt-tokens, "
                             "--output-tokens; its latencies: TTFT and inter-token)");
    }
  } else if (std::string n = named({"--prompt-tokens", "--output-tokens"}); !n.empty()) {
    return InvalidArgument(n + ": for --endpoint /v1/completions only");
  }
  return Status::Ok();
}

int RunBench(const BenchFlags& f) {
  if (Status s = CheckBenchFlags(f); !s.ok()) return ReportError(s);
  if (f.concurrency < 1 || f.documents < 1 || f.query_tokens < 1 || f.doc_tokens < 1 ||
      (f.duration_s <= 0 && f.requests < 1)) {
    return ReportError(InvalidArgument(
        "--concurrency, --documents, --query-tokens, --doc-tokens and --requests (or "
        "--duration) must be positive"));
  }
  Shared sh;
  sh.arrival_rng.seed(f.seed * 104729u + 12345u);  // Poisson arrivals follow --seed too
  Bodies bodies;
  if (!f.input.empty()) {
    auto b = ReadBodies(f.input);
    if (!b.ok()) return ReportError(b.status());
    bodies = std::move(b).value();
    sh.bodies = &bodies;
  } else if (f.grpc_model.empty()) {
    std::mt19937 probe(0);
    if (auto b = MakeBody(f, probe); !b.ok()) return ReportError(b.status());
  }
  if (f.request_rate < 0) return ReportError(InvalidArgument("--request-rate must be >= 0"));
  const double start = NowSeconds();
  const double deadline = start + f.duration_s;
  sh.next_arrival = start;
  std::vector<std::thread> threads;
  if (!f.grpc_model.empty() && (sh.bodies || IsGeneration(f))) {
    return ReportError(InvalidArgument("--grpc-model sends synthetic rerank requests only"));
  }
  for (int i = 0; i < f.concurrency; ++i) {
    threads.emplace_back(f.grpc_model.empty() ? Client : GrpcClient, std::cref(f), i, deadline,
                         &sh);
  }
  const size_t total = f.duration_s > 0 ? 0 : static_cast<size_t>(f.requests);
  ProgressBar bar("requests", total, "req", /*tokens=*/false);
  std::atomic<bool> running{true};
  std::thread progress([&] {
    while (running) {
      if (total) bar.Update(static_cast<size_t>(sh.done.load()), 0);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  for (auto& t : threads) t.join();
  // Before joining the progress thread, which may sleep up to 100 ms more.
  const double el = std::max(NowSeconds() - start, 1e-9);
  running = false;
  progress.join();
  if (!f.latency_log.empty() && !IsGeneration(f)) {
    std::FILE* out = std::fopen(f.latency_log.c_str(), "w");
    if (!out) return ReportError(InvalidArgument("--latency-log: cannot write " + f.latency_log));
    // NowSeconds is steady: its times as Unix time, for lining them up with other logs.
    const double unix_now =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    const double offset = unix_now - NowSeconds();
    for (size_t i = 0; i < sh.latencies.size() && i < sh.starts.size(); ++i) {
      std::fprintf(out, "%.6f %.6f\n", sh.starts[i] + offset, sh.latencies[i]);
    }
    std::fclose(out);
  }
  std::vector<double> lat = sh.latencies;
  const size_t ok = lat.size();
  if (IsGeneration(f)) {
    std::printf(
        "%s (streamed), concurrency %d%s, %s\n", f.endpoint.c_str(), f.concurrency,
        f.request_rate > 0
            ? (", Poisson arrivals at " + std::to_string(f.request_rate) + " req/s").c_str()
            : "",
        sh.bodies
            ? ("request bodies from " + f.input).c_str()
            : ("prompt tokens " + f.prompt_tokens + ", output tokens " + f.output_tokens).c_str());
    std::printf("requests: %zu ok, %d total in %.2f s: %.2f req/s, %.1f output tokens/s\n", ok,
                sh.done.load(), el, ok / el, static_cast<double>(sh.output_tokens.load()) / el);
    std::vector<double> ttft = sh.ttft, itl = sh.itl;
    std::printf("TTFT: p50 %.2f ms, p95 %.2f ms, p99 %.2f ms\n", 1e3 * Percentile(ttft, 0.50),
                1e3 * Percentile(ttft, 0.95), 1e3 * Percentile(ttft, 0.99));
    std::printf("inter-token latency: p50 %.2f ms, p95 %.2f ms, p99 %.2f ms\n",
                1e3 * Percentile(itl, 0.50), 1e3 * Percentile(itl, 0.95),
                1e3 * Percentile(itl, 0.99));
    std::printf("latency (whole request): p50 %.2f ms, p95 %.2f ms, p99 %.2f ms\n",
                1e3 * Percentile(lat, 0.50), 1e3 * Percentile(lat, 0.95),
                1e3 * Percentile(lat, 0.99));
  } else if (sh.bodies) {
    std::printf("%s, concurrency %d, %zu request bodies from %s\n", f.endpoint.c_str(),
                f.concurrency, bodies.bodies.size(), f.input.c_str());
  } else {
    std::printf(
        "%s, concurrency %d, %d documents x %d tokens (+ query %d tokens)\n",
        f.grpc_model.empty() ? f.endpoint.c_str() : ("gRPC ModelInfer " + f.grpc_model).c_str(),
        f.concurrency, f.documents, f.doc_tokens, f.query_tokens);
  }
  if (!IsGeneration(f)) {
    std::printf("requests: %zu ok, %d total in %.2f s: %.1f req/s, %.1f documents/s\n", ok,
                sh.done.load(), el, ok / el, static_cast<double>(sh.inputs_ok.load()) / el);
    std::printf("latency: p50 %.2f ms, p95 %.2f ms, p99 %.2f ms\n", 1e3 * Percentile(lat, 0.50),
                1e3 * Percentile(lat, 0.95), 1e3 * Percentile(lat, 0.99));
  }
  int errors = 0;
  for (const auto& [what, n] : sh.errors) {
    std::printf("errors: %d x %s\n", n, what.c_str());
    errors += n;
  }
  if (!errors) std::printf("errors: none\n");
  return errors ? 1 : 0;
}

Registrar bench_cmd(Command{
    "bench", "HTTP load generator for a running sluice serve (synthetic or --input requests)",
    [](CLI::App* sub) {
      auto f = std::make_shared<BenchFlags>();
      sub->add_option("--host", f->host)->capture_default_str();
      sub->add_option("--port", f->port)->capture_default_str();
      sub->add_option("--endpoint", f->endpoint,
                      "/v1/rerank, /rerank, /score, /v1/embeddings, /embed, /pooling, /classify, "
                      "/predict, /v2/models/NAME/infer (KServe, token ids), /v1/completions "
                      "(streamed: TTFT and inter-token latency)")
          ->capture_default_str();
      sub->add_option("--concurrency", f->concurrency, "concurrent keep-alive clients")
          ->capture_default_str();
      sub->add_option("--requests", f->requests, "requests in all")->capture_default_str();
      sub->add_option("--duration", f->duration_s, "seconds to run (instead of --requests)");
      sub->add_option("--documents", f->documents, "documents (inputs) per request")
          ->capture_default_str();
      sub->add_option("--query-tokens", f->query_tokens)->capture_default_str();
      sub->add_option("--doc-tokens", f->doc_tokens, "tokens per document")->capture_default_str();
      sub->add_option("--vocab", f->vocab, "token ids are drawn from [5, vocab)")
          ->capture_default_str();
      sub->add_option("--api-key", f->api_key);
      sub->add_option("--seed", f->seed)->capture_default_str();
      sub->add_option("--prompt-tokens", f->prompt_tokens,
                      "/v1/completions: prompt length, N or A:B (uniform)")
          ->capture_default_str();
      sub->add_option("--output-tokens", f->output_tokens,
                      "/v1/completions: max_tokens (with ignore_eos), N or A:B (uniform)")
          ->capture_default_str();
      sub->add_option("--request-rate", f->request_rate,
                      "Poisson arrivals at this many requests/s (0 = closed loop at "
                      "--concurrency)")
          ->capture_default_str();
      sub->add_option("--grpc-model", f->grpc_model,
                      "send the synthetic rerank requests as KServe v2 gRPC ModelInfer calls "
                      "to this model (--port: the server's --grpc-port)");
      sub->add_option("--latency-log", f->latency_log,
                      "write each successful request's start (Unix seconds) and latency "
                      "(seconds), one line each (not for /v1/completions)");
      sub->add_option("--input", f->input,
                      "JSONL file of request bodies for --endpoint (one per line, sent in "
                      "order, cycled) instead of synthetic ones");
      return std::function<int()>([f, sub] {
        for (const CLI::Option* o : sub->get_options()) {
          if (o->count() > 0) f->given.insert(o->get_name());
        }
        return RunBench(*f);
      });
    }});

}  // namespace
}  // namespace sluice::cli
