// GEMM throughput on the CPU backend: oneDNN f32/bf16 through Backend::Linear (what models
// use: includes bucketing and, for bf16, the f32 -> bf16 activation conversion), raw oneDNN
// matmul (prepacked weights, execute only), and OpenBLAS sgemm (dlopen'ed, if present), on
// BERT-base and Qwen3-0.6B projection shapes. Also times Backend::Attention.
//
// Usage: gemm_bench [--threads N] [--reps R] [--m M] [--no-gemm-table] [--attention-only]
//                   [--cpu-time] [--avx2]
// Prints a markdown table: median GFLOP/s over R repetitions (after 3 warm-ups) and the
// spread (min..max).
#include <dlfcn.h>
#include <hwy/targets.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <oneapi/dnnl/dnnl.hpp>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/attention.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_linear.h"

namespace {

using namespace sluice;

struct Stats {
  double median, lo, hi;
};

// --cpu-time: time with the calling thread's CPU clock instead of the wall clock; with
// --threads 1 (OpenMP runs the work on the calling thread) this is much less sensitive to
// other processes on a shared machine.
bool g_cpu_time = false;

double Now() {
  if (g_cpu_time) {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

Stats Measure(double flops, int reps, const std::function<void()>& fn) {
  for (int i = 0; i < 3; ++i) fn();  // warm-up: primitive creation, page faults, clocks
  std::vector<double> g;
  for (int r = 0; r < reps; ++r) {
    const double t0 = Now();
    fn();
    const double s = Now() - t0;
    g.push_back(flops / s / 1e9);
  }
  std::sort(g.begin(), g.end());
  return {g[g.size() / 2], g.front(), g.back()};
}

std::string Fmt(const Stats& s) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.0f (%.0f..%.0f)", s.median, s.lo, s.hi);
  return buf;
}

void Appendf(std::string* out, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
void Appendf(std::string* out, const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  *out += buf;
}

void FillRandom(std::vector<float>* v, uint32_t seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (auto& x : *v) x = u(g);
}

std::string CpuModel() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown";
}

using SgemmFn = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int,
                         float, float*, int);
using SetThreadsFn = void (*)(int);

// Raw oneDNN: prepacked weights, fixed-M primitive, bias, execute only.
// runtime_m: M given as DNNL_RUNTIME_DIM_VAL at creation (oneDNN 2.6 then uses gemm:jit
// with plain weights instead of brgemm with blocked weights).
Stats RawDnnl(int64_t m, int64_t k, int64_t n, bool bf16, bool runtime_m, int reps,
              const std::vector<float>& x, const std::vector<float>& w,
              const std::vector<float>& b) {
  using dt = dnnl::memory::data_type;
  using tag = dnnl::memory::format_tag;
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream s(eng);
  const dt cdt = bf16 ? dt::bf16 : dt::f32;
  const int64_t pm = runtime_m ? DNNL_RUNTIME_DIM_VAL : m;
  dnnl::memory::desc src_md({m, k}, cdt, tag::ab), w_any({k, n}, cdt, tag::any);
  dnnl::memory::desc dst_md({m, n}, dt::f32, tag::ab), b_md({1, n}, dt::f32, tag::ab);
  dnnl::memory::desc src_pmd({pm, k}, cdt, tag::ab), dst_pmd({pm, n}, dt::f32, tag::ab);
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src_pmd, w_any, b_md, dst_pmd), eng);
  dnnl::memory w_f32({{k, n}, dt::f32, tag::ba}, eng, const_cast<float*>(w.data()));
  dnnl::memory w_packed(pd.weights_desc(), eng);
  dnnl::reorder(w_f32, w_packed).execute(s, w_f32, w_packed);
  dnnl::memory x_f32({{m, k}, dt::f32, tag::ab}, eng, const_cast<float*>(x.data()));
  dnnl::memory src(src_md, eng);
  dnnl::reorder(x_f32, src).execute(s, x_f32, src);
  dnnl::memory bias(b_md, eng, const_cast<float*>(b.data())), dst(dst_md, eng);
  s.wait();
  dnnl::matmul mm(pd);
  return Measure(2.0 * m * n * k, reps, [&] {
    mm.execute(s, {{DNNL_ARG_SRC, src},
                   {DNNL_ARG_WEIGHTS, w_packed},
                   {DNNL_ARG_BIAS, bias},
                   {DNNL_ARG_DST, dst}});
    s.wait();
  });
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2, reps = 7;
  int64_t m = 8192;
  bool gemm = true, linear_m = true;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--no-gemm-table")) gemm = false;
    if (!std::strcmp(argv[i], "--attention-only")) gemm = linear_m = false;
    if (!std::strcmp(argv[i], "--cpu-time")) g_cpu_time = true;
    // Highway kernels (sluice-gemm, attention) at most at AVX2, as on AVX2-only machines.
    if (!std::strcmp(argv[i], "--avx2")) {
      hwy::SetSupportedTargetsForTest(hwy::SupportedTargets() & ~(HWY_AVX2 - 1));
    }
  }
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--threads")) threads = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--reps")) reps = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--m")) m = std::atoll(argv[i + 1]);
  }
  auto be_or = CreateCpuBackend(BackendOptions{DeviceKind::kCpu, 0, threads});
  if (!be_or.ok()) return 1;
  auto be = std::move(be_or).value();

  std::printf(
      "CPU: %s\nbackend: %s\nthreads: %d, M = %ld, median of %d reps (min..max), "
      "GFLOP/s\n\n",
      CpuModel().c_str(), be->Describe().c_str(), threads, static_cast<long>(m), reps);
  std::string table;
  Appendf(&table,
          "| model | K | N | oneDNN f32 (Linear) | oneDNN f32 (raw) | oneDNN bf16 (Linear) "
          "| oneDNN bf16 (raw) | OpenBLAS sgemm | oneDNN f32 (runtime M) | oneDNN bf16 (runtime M) "
          "| sluice-gemm f32 (Linear) | sluice-gemm bf16 (Linear) |\n"
          "|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  struct Shape {
    const char* model;
    int64_t k, n;
  };
  const Shape shapes[] = {{"BERT-base", 768, 768},    {"BERT-base", 768, 3072},
                          {"BERT-base", 768, 2304},   {"BERT-base", 3072, 768},
                          {"Qwen3-0.6B", 1024, 3072}, {"Qwen3-0.6B", 1024, 6144},
                          {"Qwen3-0.6B", 1024, 4096}, {"Qwen3-0.6B", 3072, 1024}};
  std::mt19937 g(1);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<std::array<std::string, 9>> rows;
  for (const Shape& s : shapes) {
    if (!gemm) break;
    std::vector<float> x(m * s.k), w(s.n * s.k), b(s.n), out(m * s.n);
    FillRandom(&x, 1);
    FillRandom(&w, 2);
    FillRandom(&b, 3);
    const double flops = 2.0 * m * s.n * s.k;
    HostTensor hw{w.data(), DType::kF32, {s.n, s.k}, "w"};
    HostTensor hb{b.data(), DType::kF32, {s.n}, "b"};
    std::string cells[9];
    for (int c = 0; c < 2; ++c) {  // sluice's own GEMM (what AVX2 machines run)
      cpu::LinearRunner::SetPathForTesting("sluice");
      auto lw = be->PrepareLinear(hw, &hb, c == 0 ? DType::kF32 : DType::kBF16);
      cpu::LinearRunner::SetPathForTesting("");
      if (!lw.ok()) return 1;
      LinearParams p{lw->get(), Tensor{x.data(), DType::kF32, m, s.k, 0},
                     Tensor{out.data(), DType::kF32, m, s.n, 0}};
      cells[7 + c] = Fmt(Measure(flops, reps, [&] { be->Linear(p); }));
    }
    for (int c = 0; c < 2; ++c) {
      auto lw = be->PrepareLinear(hw, &hb, c == 0 ? DType::kF32 : DType::kBF16);
      if (!lw.ok()) return 1;
      LinearParams p{lw->get(), Tensor{x.data(), DType::kF32, m, s.k, 0},
                     Tensor{out.data(), DType::kF32, m, s.n, 0}};
      cells[c * 2] = Fmt(Measure(flops, reps, [&] { be->Linear(p); }));
      cells[c * 2 + 1] = Fmt(RawDnnl(m, s.k, s.n, c == 1, false, reps, x, w, b));
      cells[5 + c] = Fmt(RawDnnl(m, s.k, s.n, c == 1, true, reps, x, w, b));
    }
    rows.push_back({});
    for (int c = 0; c < 9; ++c) rows.back()[c] = cells[c];
  }

  // Linear over varying M (bucketed primitives, padded tails): BERT-base FFN up projection.
  std::string tail;
  if (linear_m) {
    Appendf(&tail,
            "\n| Linear K=768 N=3072 | M | primitive calls | first call ms | f32 GFLOP/s | bf16 "
            "GFLOP/s |\n|---|---|---|---|---|---|\n");
    {
      const int64_t k = 768, n = 3072;
      std::vector<float> w(n * k), b(n), x(4096 * k), out(4096 * n);
      for (auto& v : w) v = u(g);
      for (auto& v : x) v = u(g);
      HostTensor hw{w.data(), DType::kF32, {n, k}, "w"};
      HostTensor hb{b.data(), DType::kF32, {n}, "b"};
      auto wf = be->PrepareLinear(hw, &hb, DType::kF32);
      auto wb = be->PrepareLinear(hw, &hb, DType::kBF16);
      if (!wf.ok() || !wb.ok()) return 1;
      for (int64_t mm : {1, 7, 16, 33, 100, 300, 512, 1000, 3000}) {
        auto params = [&](const LinearWeight* lw) {
          return LinearParams{lw, Tensor{x.data(), DType::kF32, mm, k, 0},
                              Tensor{out.data(), DType::kF32, mm, n, 0}, Activation::kGeluErf};
        };
        auto t0 = std::chrono::steady_clock::now();
        be->Linear(params(wf->get()));
        const double first =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() * 1e3;
        const double flops = 2.0 * mm * n * k;
        Stats sf = Measure(flops, reps, [&] { be->Linear(params(wf->get())); });
        Stats sb = Measure(flops, reps, [&] { be->Linear(params(wb->get())); });
        Appendf(&tail, "| | %ld | %s | %.1f | %s | %s |\n", static_cast<long>(mm),
                cpu::LinearRunner::DescribePlan(mm).c_str(), first, Fmt(sf).c_str(),
                Fmt(sb).c_str());
      }
    }
  }

  // Attention: 512- and 128-token sequences; BERT-base, MiniLM-L6 and Qwen3 head shapes.
  Appendf(&tail,
          "\n| attention | seqs x len | heads/kv x dim | causal | products | GFLOP/s |\n"
          "|---|---|---|---|---|---|\n");
  struct AttnShape {
    int seqs, len, heads, kv, dim;
    bool causal;
  };
  for (const AttnShape& a :
       {AttnShape{4, 512, 12, 12, 64, false}, AttnShape{16, 128, 12, 12, 64, false},
        AttnShape{64, 128, 12, 12, 64, false}, AttnShape{64, 128, 12, 12, 32, false},
        AttnShape{64, 128, 12, 12, 32, true}, AttnShape{4, 512, 16, 8, 128, true}}) {
    const int64_t tokens = int64_t{a.seqs} * a.len;
    const int64_t qc = int64_t{a.heads} * a.dim, kc = int64_t{a.kv} * a.dim;
    std::vector<float> qkv(tokens * (qc + 2 * kc)), o(tokens * qc);
    for (auto& v : qkv) v = u(g);
    std::vector<int32_t> cu(a.seqs + 1);
    for (int i = 0; i <= a.seqs; ++i) cu[i] = i * a.len;
    Tensor t{qkv.data(), DType::kF32, tokens, qc + 2 * kc, 0};
    AttentionParams p{t.ColSlice(0, qc),
                      t.ColSlice(qc, kc),
                      t.ColSlice(qc + kc, kc),
                      Tensor{o.data(), DType::kF32, tokens, qc, 0},
                      cu.data(),
                      a.seqs,
                      a.len,
                      a.heads,
                      a.kv,
                      a.dim,
                      1.f / std::sqrt(float(a.dim)),
                      a.causal,
                      0};
    // QK^T and PV: 4 * len^2 * dim flops per head per sequence (half when causal).
    double flops = 4.0 * a.seqs * a.heads * double(a.len) * a.len * a.dim;
    if (a.causal) flops /= 2;
    // Several calls per sample (>= ~8 GFLOP) so that a coarse CPU clock still resolves it.
    const int calls = static_cast<int>(std::ceil(8e9 / flops));
    // f32, and bf16 products where they run on AMX (a bf16 or int8 model's attention).
    for (DType products : {DType::kF32, DType::kBF16}) {
      if (products == DType::kBF16 && !cpu::AmxAttentionAvailable()) continue;
      p.products = products;
      Stats st = Measure(flops * calls, reps, [&] {
        for (int c = 0; c < calls; ++c) be->Attention(p);
      });
      Appendf(&tail, "| attention | %d x %d | %d/%d x %d | %s | %s | %s |\n", a.seqs, a.len,
              a.heads, a.kv, a.dim, a.causal ? "yes" : "no",
              products == DType::kF32 ? "f32" : "bf16 (amx)", Fmt(st).c_str());
    }
  }

  // OpenBLAS last: its pthread pool yield-spins after each call and would slow whatever runs
  // next on 2 cores.
  SgemmFn sgemm = nullptr;
  if (void* blas = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL)) {
    sgemm = reinterpret_cast<SgemmFn>(dlsym(blas, "cblas_sgemm"));
    if (auto set = reinterpret_cast<SetThreadsFn>(dlsym(blas, "openblas_set_num_threads"))) {
      set(threads);
    }
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    const Shape& s = shapes[i];
    rows[i][4] = "n/a";
    if (!sgemm) continue;
    std::vector<float> x(m * s.k), w(s.n * s.k), out(m * s.n);
    FillRandom(&x, 1);
    FillRandom(&w, 2);
    // Row-major C[M,N] = X[M,K] * W[N,K]^T (101 = RowMajor, 111 = NoTrans, 112 = Trans).
    rows[i][4] = Fmt(Measure(2.0 * m * s.n * s.k, reps, [&] {
      sgemm(101, 111, 112, static_cast<int>(m), static_cast<int>(s.n), static_cast<int>(s.k), 1.f,
            x.data(), static_cast<int>(s.k), w.data(), static_cast<int>(s.k), 0.f, out.data(),
            static_cast<int>(s.n));
    }));
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    Appendf(&table, "| %s | %ld | %ld |", shapes[i].model, static_cast<long>(shapes[i].k),
            static_cast<long>(shapes[i].n));
    for (const auto& cell : rows[i]) Appendf(&table, " %s |", cell.c_str());
    Appendf(&table, "\n");
  }
  std::printf("%s%s", table.c_str(), tail.c_str());
  return 0;
}
