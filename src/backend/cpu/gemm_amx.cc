// sluice's AMX GEMM (gemm_x86.h GemmBf16Amx / GemmI8Amx): gemm_amx_inl.h's driver over
// the real tile instructions. The tile operations and the driver's instantiation are
// compiled for AMX + AVX-512 through a target pragma; the entry points check
// AmxBf16Usable() / AmxI8Usable() (CPU, ISA cap and Linux permission) before any tile
// instruction runs, and refuse (abort) otherwise: callers (cpu_linear.cc) choose the path
// only where these are true.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/amx.h"
#include "backend/cpu/amx_emu_inl.h"
#include "backend/cpu/cpu_features.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/gemm_x86.h"

namespace sluice::cpu::x86 {

bool AmxBf16Usable() { return Features().amx_bf16 && amx::Available(); }
bool AmxI8Usable() { return Features().amx_int8 && amx::Available(); }

namespace {
std::atomic<int> g_amx_kernel{-1};  // -1: each dtype's default
}  // namespace

// The defaults (docs/benchmarks.md, "AMX tile schedules" and runs 6-10 of the CPU peers):
// int8 runs 2x2: on 2 cores of a Sapphire Rapids-class Xeon it leads 1x4 by 4-14% in the
// BERT-base GEMMs at K = 768 and by 23-75% at K = 3,072, and end to end (BERT-base, A tiles)
// 55.7 against 51.9 pairs/s median in 5 interleaved rounds (run 10), MiniLM-L6 ahead in runs
// 6-7 as well. bf16 keeps 1x4, whose K chunks keep a K = 3072 block in L1 (1.6x there; bf16's
// default path is oneDNN's kernel anyway).
AmxKernel CurrentAmxKernel(bool int8) {
  const int k = g_amx_kernel.load(std::memory_order_relaxed);
  if (k >= 0) return static_cast<AmxKernel>(k);
  return int8 ? AmxKernel::k2x2 : AmxKernel::k1x4;
}
bool AmxKernelOverridden() { return g_amx_kernel.load(std::memory_order_relaxed) >= 0; }
void SetAmxKernelForTesting(AmxKernel k) {
  g_amx_kernel.store(static_cast<int>(k), std::memory_order_relaxed);
}
void ResetAmxKernelForTesting() { g_amx_kernel.store(-1, std::memory_order_relaxed); }

namespace {
std::atomic<int> g_i8_tiled_a{-1};  // -1: the default
}  // namespace
bool AmxI8TiledA() {
  const int v = g_i8_tiled_a.load(std::memory_order_relaxed);
  return v >= 0 ? v != 0 : kAmxI8TiledADefault;
}
void SetAmxI8TiledAForTesting(bool tiles) {
  g_i8_tiled_a.store(tiles ? 1 : 0, std::memory_order_relaxed);
}
void ResetAmxI8TiledAForTesting() { g_i8_tiled_a.store(-1, std::memory_order_relaxed); }
namespace {
// The tuning's fields, each atomic (the defaults unless a benchmark or test set them).
std::atomic<int64_t> g_chunk{AmxTuning{}.chunk};
std::atomic<int64_t> g_tile_group{AmxTuning{}.tile_group};
std::atomic<int64_t> g_l2_bytes{AmxTuning{}.l2_bytes};
std::atomic<bool> g_epilogue{true};

bool ParseInt(const std::string& s, int64_t lo, int64_t hi, int64_t* v) {
  if (s.empty() || s.size() > 9 || s.find_first_not_of("0123456789") != std::string::npos) {
    return false;
  }
  *v = std::stoll(s);
  return *v >= lo && *v <= hi;
}
}  // namespace

AmxTuning CurrentAmxTuning() {
  AmxTuning t;
  t.chunk = g_chunk.load(std::memory_order_relaxed);
  t.tile_group = g_tile_group.load(std::memory_order_relaxed);
  t.l2_bytes = g_l2_bytes.load(std::memory_order_relaxed);
  t.epilogue = g_epilogue.load(std::memory_order_relaxed);
  return t;
}

bool ParseAmxTuning(const char* s, AmxTuning* t) {
  std::vector<std::string> f(1);
  for (const char* c = s; *c; ++c) {
    if (*c == ':') {
      f.emplace_back();
    } else {
      f.back() += *c;
    }
  }
  if (f.size() != 3 && !(f.size() == 4 && f[3] == "noepi")) return false;
  AmxTuning r;
  int64_t kb = 0;
  if (!ParseInt(f[0], 16, 1 << 20, &r.chunk) || r.chunk % 16 != 0 ||
      !ParseInt(f[1], 1, 8, &r.tile_group) || !ParseInt(f[2], 1, 1 << 20, &kb)) {
    return false;
  }
  r.l2_bytes = kb << 10;
  r.epilogue = f.size() == 3;
  *t = r;
  return true;
}

void SetAmxTuningForTesting(const AmxTuning& t) {
  g_chunk.store(t.chunk, std::memory_order_relaxed);
  g_tile_group.store(t.tile_group, std::memory_order_relaxed);
  g_l2_bytes.store(t.l2_bytes, std::memory_order_relaxed);
  g_epilogue.store(t.epilogue, std::memory_order_relaxed);
}
void ResetAmxTuningForTesting() { SetAmxTuningForTesting(AmxTuning{}); }

const char* AmxKernelName(AmxKernel k) {
  switch (k) {
    case AmxKernel::k1x4:
      return "1x4";
    case AmxKernel::k2x2:
      return "2x2";
    case AmxKernel::k2x2Prefetch:
      return "2x2pf";
  }
  return "?";
}

}  // namespace sluice::cpu::x86

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,amx-tile,amx-bf16,amx-int8")

// Only gemm_amx_inl.h's own code (internal linkage) is compiled for AMX here: its includes
// are already in above, and templates defined before the pragma (the standard library's)
// keep the default target where instantiated below (GCC applies a target pragma at a
// function's definition), so no weak symbol of this file carries AVX-512/AMX code.
#include "backend/cpu/gemm_amx_inl.h"

namespace sluice::cpu::x86 {
namespace {

// The tile macros of GCC's headers stringify the tile number: literals only, hence the
// `if constexpr` ladders.
template <bool kInt8>
struct AmxHwOps {
  static void Begin() { amx::ConfigureSquareTiles(); }
  static void End() { _tile_release(); }
  static void ZeroAcc() {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
  }
  static void LoadA(const void* p, int64_t stride) { _tile_loadd(4, p, stride); }
  // GCC's tileloadd asm names no memory operand: the barrier keeps every store to the
  // accumulator buffer before it (they are tilestored, which clobbers memory, anyway).
  template <int J>
  static void LoadAcc(const void* p, int64_t stride) {
    __asm__ volatile("" ::: "memory");
    if constexpr (J == 0) {
      _tile_loadd(0, p, stride);
    } else if constexpr (J == 1) {
      _tile_loadd(1, p, stride);
    } else if constexpr (J == 2) {
      _tile_loadd(2, p, stride);
    } else {
      _tile_loadd(3, p, stride);
    }
  }
  template <int J>
  static void LoadB(const void* p) {
    static_assert(AmxBTile(0) == 5 && AmxBTile(1) == 6 && AmxBTile(2) == 7 && AmxBTile(3) == 5);
    if constexpr (J == 0 || J == 3) {
      _tile_loadd(5, p, 256);
    } else if constexpr (J == 1) {
      _tile_loadd(6, p, 256);
    } else {
      _tile_loadd(7, p, 256);
    }
  }
  template <int J>
  static void Dp() {
    if constexpr (kInt8) {  // uint8 activations (A) x int8 weights (B)
      if constexpr (J == 0) {
        _tile_dpbusd(0, 4, 5);
      } else if constexpr (J == 1) {
        _tile_dpbusd(1, 4, 6);
      } else if constexpr (J == 2) {
        _tile_dpbusd(2, 4, 7);
      } else {
        _tile_dpbusd(3, 4, 5);
      }
    } else {
      if constexpr (J == 0) {
        _tile_dpbf16ps(0, 4, 5);
      } else if constexpr (J == 1) {
        _tile_dpbf16ps(1, 4, 6);
      } else if constexpr (J == 2) {
        _tile_dpbf16ps(2, 4, 7);
      } else {
        _tile_dpbf16ps(3, 4, 5);
      }
    }
  }
  template <int J>
  static void StoreAcc(void* p, int64_t stride) {
    if constexpr (J == 0) {
      _tile_stored(0, p, stride);
    } else if constexpr (J == 1) {
      _tile_stored(1, p, stride);
    } else if constexpr (J == 2) {
      _tile_stored(2, p, stride);
    } else {
      _tile_stored(3, p, stride);
    }
  }
  // The 2x2 kernel's operations (gemm_amx_inl.h AmxMicro2x2): any tile by number.
  template <int T>
  static void Load(const void* p, int64_t stride) {
    static_assert(T >= 0 && T < 8);
    __asm__ volatile("" ::: "memory");
    if constexpr (T == 0) {
      _tile_loadd(0, p, stride);
    } else if constexpr (T == 1) {
      _tile_loadd(1, p, stride);
    } else if constexpr (T == 2) {
      _tile_loadd(2, p, stride);
    } else if constexpr (T == 3) {
      _tile_loadd(3, p, stride);
    } else if constexpr (T == 4) {
      _tile_loadd(4, p, stride);
    } else if constexpr (T == 5) {
      _tile_loadd(5, p, stride);
    } else if constexpr (T == 6) {
      _tile_loadd(6, p, stride);
    } else {
      _tile_loadd(7, p, stride);
    }
  }
  // C += A x B for the 2x2 kernel's pairs: C = 2 * (A - 4) + (B - 6).
  template <int C, int A, int B>
  static void DpTiles() {
    static_assert(A >= 4 && A <= 5 && B >= 6 && B <= 7 && C == 2 * (A - 4) + (B - 6));
    if constexpr (kInt8) {
      if constexpr (C == 0) {
        _tile_dpbusd(0, 4, 6);
      } else if constexpr (C == 1) {
        _tile_dpbusd(1, 4, 7);
      } else if constexpr (C == 2) {
        _tile_dpbusd(2, 5, 6);
      } else {
        _tile_dpbusd(3, 5, 7);
      }
    } else {
      if constexpr (C == 0) {
        _tile_dpbf16ps(0, 4, 6);
      } else if constexpr (C == 1) {
        _tile_dpbf16ps(1, 4, 7);
      } else if constexpr (C == 2) {
        _tile_dpbf16ps(2, 5, 6);
      } else {
        _tile_dpbf16ps(3, 5, 7);
      }
    }
  }
};

void DriveBf16(const AmxPlan& p) { AmxDrive<AmxHwOps<false>>(p); }
void DriveI8(const AmxPlan& p) { AmxDrive<AmxHwOps<true>>(p); }

}  // namespace
}  // namespace sluice::cpu::x86

#pragma GCC pop_options
#pragma GCC diagnostic pop

namespace sluice::cpu::x86 {

void GemmBf16Amx(const Bf16Args& a) {
  if (a.m <= 0 || a.n <= 0) return;
  if (a.kernel != Bf16Kernel::kDpbf16 || !AmxBf16Usable()) {
    std::fprintf(stderr, "sluice: GemmBf16Amx called without AMX-BF16 or with FMA activations\n");
    std::abort();
  }
  AmxPlan p = AmxPlanBf16(a);
  p.kernel = CurrentAmxKernel(false);
  DriveBf16(p);
}

void GemmI8Amx(const I8Args& a) {
  if (a.m <= 0 || a.n <= 0) return;
  if (!AmxI8Usable()) {
    std::fprintf(stderr, "sluice: GemmI8Amx called without AMX-INT8\n");
    std::abort();
  }
  AmxPlan p = AmxPlanI8(a);
  p.kernel = CurrentAmxKernel(true);
  DriveI8(p);
}

}  // namespace sluice::cpu::x86
