// Linear-layer paths side by side, per shape and M, through Backend::Linear (what models
// run: activation conversion/quantisation included, bias + GELU epilogue fused):
//   f32  oneDNN (brgemm where it has one)            | bf16 oneDNN 2.6 (brgemm)
//   bf16 sluice-gemm (Highway, f32 FMA on widened bf16) | bf16 sluice-avx512bf16 (vdpbf16ps)
//   bf16 sluice-avx512fma (bf16 weights widened in registers, f32 FMA)
//   int8 sluice-int8 (VNNI, or portable: run with the ISA capped below AMX)
//   bf16 sluice-amx / int8 sluice-int8(amx) (tdpbf16ps / tdpbusd, gemm_amx.cc; n/a without
//   usable AMX; the defaults: bf16 1x4, int8 2x2 with A tiles); amx-*-1x4 / -2x2 / -2x2pf:
//   the tile schedules (gemm_x86.h AmxKernel); amx-int8-*rows / *tiles: int8 activations
//   quantised into rows or into the A-tile layout (gemm_x86.h AmxI8TiledA); amx-int8-tiles is
//   1x4 with tiles (the name of runs 9-10)
// The path is fixed per weight at load for every M (batch invariance), so the choice per
// shape is made from the whole M range; docs/benchmarks.md has the figures.
//
// Usage: linear_paths_bench [--threads N] [--reps R] [--m 1,2,4,64,1024] [--set encoder|decode]
//                           [--paths onednn-f32,onednn-bf16,sluice-bf16,avx512bf16,avx512fma,int8,
//                                    amx-bf16,amx-int8,amx-bf16-2x2,amx-int8-2x2,amx-bf16-2x2pf,
//                                    amx-int8-1x4,amx-int8-2x2pf,amx-int8-rows,
//                                    amx-int8-1x4-rows,amx-int8-tiles,amx-int8-2x2-tiles]
//                           [--cpu-time] [--only SHAPE-NAME-PART] [--act gelu|none]
//                           [--amx-tunes CHUNK:GROUP:L2KB[:noepi],...]
// --amx-tunes runs every amx-* path once per blocking (gemm_x86.h AmxTuning; columns
// "PATH@TUNE"); ":noepi" skips the epilogue (the tile loop alone; output not written).
// The epilogue is bias + GELU (erf) unless --act none (bias only).
// Prints a markdown table: median GFLOP/s over R repetitions (after 2 warm-ups), spread
// (min..max), and for M <= 4 the weight bytes streamed per second (GB/s) next to the
// machine's measured read bandwidth.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_features.h"
#include "backend/cpu/cpu_linear.h"
#include "backend/cpu/gemm_x86.h"

namespace {

using namespace sluice;

// --cpu-time: the calling thread's CPU clock (use with --threads 1): on a shared machine a
// sample then does not count the time other processes held the core.
bool g_cpu_time = false;

double Now() {
  if (g_cpu_time) {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Stats {
  double median, lo, hi;  // seconds per call
};

Stats Time(int reps, const std::function<void()>& fn) {
  fn();
  fn();
  // At least ~20 ms per sample so that tiny calls are resolved.
  const double t0 = Now();
  fn();
  const double once = std::max(Now() - t0, 1e-7);
  const int inner = std::max(1, static_cast<int>(0.02 / once));
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const double s = Now();
    for (int i = 0; i < inner; ++i) fn();
    t.push_back((Now() - s) / inner);
  }
  std::sort(t.begin(), t.end());
  return {t[t.size() / 2], t.front(), t.back()};
}

// Read bandwidth: sum of a 1 GiB buffer over all threads (GB/s, best of 5).
double ReadBandwidth() {
  const size_t n = (size_t{1} << 30) / sizeof(int64_t);
  std::vector<int64_t> buf(n, 1);
  double best = 0;
  for (int r = 0; r < 5; ++r) {
    const double t0 = Now();
    int64_t s = 0;  // (wall clock)
#pragma omp parallel for reduction(+ : s) schedule(static)
    for (size_t i = 0; i < n; ++i) s += buf[i];
    const double dt = Now() - t0;
    if (s != static_cast<int64_t>(n)) std::printf("?");
    best = std::max(best, (n * sizeof(int64_t)) / dt / 1e9);
  }
  return best;
}

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(item);
  return out;
}

struct PathSpec {
  const char* name;
  DType dtype;
  const char* mode;  // SLUICE_CPU_LINEAR
  double weight_bytes;
  const char* cap = "";  // SLUICE_CPU_MAX_ISA while the weight is prepared ("": none)
  int amx = -1;          // the AMX paths' tile schedule (cpu::x86::AmxKernel), -1: the default
  int tiles = -1;        // int8 AMX: activations in the A-tile layout (AmxI8TiledA), -1: default
  std::string tune;      // AmxTuning ("" = the defaults)
  std::string label() const { return tune.empty() ? name : std::string(name) + "@" + tune; }
};

}  // namespace

int main(int argc, char** argv) {
  int threads = 2, reps = 7;
  std::string only;                       // --only: shapes whose name contains this
  Activation act = Activation::kGeluErf;  // --act gelu|none: the fused epilogue
  std::string ms_arg = "1,2,3,4,16,64,256,1024,4096", set = "encoder", tunes_arg;
  std::string paths_arg =
      "onednn-f32,onednn-bf16,sluice-bf16,avx512bf16,avx512fma,int8,amx-bf16,amx-int8";
  for (int i = 1; i < argc; ++i) {
    const bool has_value = i + 1 < argc;
    if (!std::strcmp(argv[i], "--cpu-time")) {
      g_cpu_time = true;
    } else if (!std::strcmp(argv[i], "--threads") && has_value) {
      threads = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--reps") && has_value) {
      reps = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--m") && has_value) {
      ms_arg = argv[++i];
    } else if (!std::strcmp(argv[i], "--set") && has_value) {
      set = argv[++i];
    } else if (!std::strcmp(argv[i], "--only") && has_value) {
      only = argv[++i];
    } else if (!std::strcmp(argv[i], "--act") && has_value) {
      const std::string a = argv[++i];
      if (a != "gelu" && a != "none") {
        std::fprintf(stderr, "--act must be gelu or none\n");
        return 2;
      }
      act = a == "gelu" ? Activation::kGeluErf : Activation::kNone;
    } else if (!std::strcmp(argv[i], "--paths") && has_value) {
      paths_arg = argv[++i];
    } else if (!std::strcmp(argv[i], "--amx-tunes") && has_value) {
      tunes_arg = argv[++i];
    } else {
      std::fprintf(stderr, "unknown argument %s\n", argv[i]);
      return 2;
    }
  }
  auto be_or = CreateCpuBackend(BackendOptions{DeviceKind::kCpu, 0, threads});
  if (!be_or.ok()) return 1;
  auto be = std::move(be_or).value();
  struct Shape {
    const char* name;
    int64_t k, n;
  };
  std::vector<Shape> shapes;
  if (set == "decode") {  // Qwen3-0.6B: hidden 1024, 16x128 q heads, 8x128 kv, ffn 3072
    shapes = {{"qkv", 1024, 4096},
              {"o_proj", 2048, 1024},
              {"gate_up", 1024, 6144},
              {"down", 3072, 1024},
              {"lm_head", 1024, 151936}};
  } else {  // MiniLM-L6 (384), BERT-base (768), Qwen3-0.6B (1024)
    shapes = {{"MiniLM qkv", 384, 1152},      {"MiniLM ffn up", 384, 1536},
              {"MiniLM ffn down", 1536, 384}, {"BERT qkv", 768, 2304},
              {"BERT ffn up", 768, 3072},     {"BERT ffn down", 3072, 768},
              {"Qwen3 gate_up", 1024, 6144},  {"Qwen3 down", 3072, 1024}};
  }
  std::vector<int64_t> ms;
  for (auto& s : Split(ms_arg)) ms.push_back(std::atoll(s.c_str()));
  auto K = [](cpu::x86::AmxKernel k) { return static_cast<int>(k); };
  const std::vector<PathSpec> all = {
      {"onednn-f32", DType::kF32, "onednn", 4},
      {"onednn-bf16", DType::kBF16, "onednn", 2},
      {"sluice-bf16", DType::kBF16, "sluice", 2},
      {"avx512bf16", DType::kBF16, "avx512bf16", 2},
      {"avx512fma", DType::kBF16, "avx512fma", 2},
      {"int8", DType::kI8, "auto", 1, "avx512_bf16"},
      {"amx-bf16", DType::kBF16, "amx", 2},
      {"amx-int8", DType::kI8, "amx", 1},
      {"amx-bf16-2x2", DType::kBF16, "amx", 2, "", K(cpu::x86::AmxKernel::k2x2)},
      {"amx-int8-1x4", DType::kI8, "amx", 1, "", K(cpu::x86::AmxKernel::k1x4)},
      {"amx-int8-2x2", DType::kI8, "amx", 1, "", K(cpu::x86::AmxKernel::k2x2)},
      {"amx-bf16-2x2pf", DType::kBF16, "amx", 2, "", K(cpu::x86::AmxKernel::k2x2Prefetch)},
      {"amx-int8-2x2pf", DType::kI8, "amx", 1, "", K(cpu::x86::AmxKernel::k2x2Prefetch)},
      {"amx-int8-rows", DType::kI8, "amx", 1, "", -1, 0},
      {"amx-int8-1x4-rows", DType::kI8, "amx", 1, "", K(cpu::x86::AmxKernel::k1x4), 0},
      {"amx-int8-tiles", DType::kI8, "amx", 1, "", K(cpu::x86::AmxKernel::k1x4), 1},
      {"amx-int8-2x2-tiles", DType::kI8, "amx", 1, "", K(cpu::x86::AmxKernel::k2x2), 1}};
  std::vector<PathSpec> paths;
  const std::vector<std::string> tunes = Split(tunes_arg);
  for (const auto& t : tunes) {
    cpu::x86::AmxTuning parsed;
    if (!cpu::x86::ParseAmxTuning(t.c_str(), &parsed)) {
      std::fprintf(stderr, "--amx-tunes: bad entry %s (CHUNK:GROUP:L2KB[:noepi])\n", t.c_str());
      return 2;
    }
  }
  for (auto& p : Split(paths_arg)) {
    for (auto& a : all) {
      if (p != a.name) continue;
      if (tunes.empty() || std::strncmp(a.name, "amx", 3) != 0) {
        paths.push_back(a);
        continue;
      }
      for (const auto& t : tunes) {
        PathSpec v = a;
        v.tune = t;
        paths.push_back(v);
      }
    }
  }
  const bool cpu_time = g_cpu_time;
  g_cpu_time = false;  // the bandwidth probe runs on all threads: wall clock
  const double bw = ReadBandwidth();
  g_cpu_time = cpu_time;
  std::printf(
      "threads %d, features %s, oneDNN ISA %s, read bandwidth %.1f GB/s; median of %d "
      "(min..max) GFLOP/s, [GB/s of weights for M <= 4]\n\n| shape | K | N | M |",
      threads, cpu::FeatureSummary().c_str(), cpu::LinearRunner::IsaName().c_str(), bw, reps);
  for (auto& p : paths) std::printf(" %s |", p.label().c_str());
  std::printf("\n|---|---|---|---|");
  for (size_t i = 0; i < paths.size(); ++i) std::printf("---|");
  std::printf("\n");
  std::mt19937 g(1);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  const int64_t max_m = *std::max_element(ms.begin(), ms.end());
  for (const Shape& s : shapes) {
    if (!only.empty() && std::string(s.name).find(only) == std::string::npos) continue;
    std::vector<float> w(s.n * s.k), b(s.n), x(max_m * s.k), out(max_m * s.n);
    for (auto& v : w) v = u(g) * 0.05f;
    for (auto& v : b) v = u(g);
    for (auto& v : x) v = u(g);
    HostTensor hw{w.data(), DType::kF32, {s.n, s.k}, "w"};
    HostTensor hb{b.data(), DType::kF32, {s.n}, "b"};
    std::vector<std::vector<std::string>> cells(ms.size());
    for (const PathSpec& p : paths) {
      cpu::LinearRunner::SetPathForTesting(p.mode);
      cpu::SetMaxIsaForTesting(p.cap);  // int8: VNNI (auto picks AMX on AMX machines)
      auto lw = be->PrepareLinear(hw, &hb, p.dtype);
      cpu::SetMaxIsaForTesting("");
      cpu::LinearRunner::SetPathForTesting("");
      for (size_t i = 0; i < ms.size(); ++i) {
        if (!lw.ok()) {
          cells[i].push_back("n/a");
          continue;
        }
        const int64_t m = ms[i];
        LinearParams lp{lw->get(), Tensor{x.data(), DType::kF32, m, s.k, 0},
                        Tensor{out.data(), DType::kF32, m, s.n, 0}, act};
        if (p.amx >= 0) cpu::x86::SetAmxKernelForTesting(static_cast<cpu::x86::AmxKernel>(p.amx));
        if (p.tiles >= 0) cpu::x86::SetAmxI8TiledAForTesting(p.tiles == 1);
        cpu::x86::AmxTuning tune;
        if (!p.tune.empty()) cpu::x86::ParseAmxTuning(p.tune.c_str(), &tune);
        cpu::x86::SetAmxTuningForTesting(tune);
        Stats st = Time(reps, [&] { be->Linear(lp); });
        cpu::x86::ResetAmxTuningForTesting();
        cpu::x86::ResetAmxKernelForTesting();
        cpu::x86::ResetAmxI8TiledAForTesting();
        const double f = 2.0 * m * s.n * s.k / 1e9;
        char buf[96];
        int len = std::snprintf(buf, sizeof(buf), "%.0f (%.0f..%.0f)", f / st.median, f / st.hi,
                                f / st.lo);
        if (m <= 4) {
          std::snprintf(buf + len, sizeof(buf) - len, " [%.1f]",
                        s.n * s.k * p.weight_bytes / st.median / 1e9);
        }
        cells[i].push_back(buf);
      }
    }
    for (size_t i = 0; i < ms.size(); ++i) {
      std::printf("| %s | %ld | %ld | %ld |", s.name, static_cast<long>(s.k),
                  static_cast<long>(s.n), static_cast<long>(ms[i]));
      for (auto& c : cells[i]) std::printf(" %s |", c.c_str());
      std::printf("\n");
      std::fflush(stdout);
    }
  }
  return 0;
}
