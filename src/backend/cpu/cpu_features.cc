#include "backend/cpu/cpu_features.h"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace sluice::cpu {
namespace {

uint64_t XGetBv() {
  uint32_t eax, edx;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<uint64_t>(edx) << 32) | eax;
}

CpuFeatures Detect() {
  CpuFeatures f;
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool osxsave = c & (1u << 27), fma = c & (1u << 12);
  if (!osxsave) return f;
  const uint64_t xcr0 = XGetBv();
  const bool os_ymm = (xcr0 & 0x6) == 0x6, os_zmm = (xcr0 & 0xe6) == 0xe6;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return f;
  const bool avx2 = b & (1u << 5);
  const bool f512 = b & (1u << 16), dq = b & (1u << 17), bw = b & (1u << 30), vl = b & (1u << 31);
  f.avx2 = os_ymm && avx2 && fma;
  f.avx512 = f.avx2 && os_zmm && f512 && dq && bw && vl;
  f.avx512_vnni = f.avx512 && (c & (1u << 11));
  f.amx_bf16 = d & (1u << 22);
  f.amx_tile = d & (1u << 24);
  f.amx_int8 = d & (1u << 25);
  unsigned a1, b1, c1, d1;
  if (__get_cpuid_count(7, 1, &a1, &b1, &c1, &d1)) f.avx512_bf16 = f.avx512 && (a1 & (1u << 5));
  // AMX needs AVX-512 here (the kernels' epilogues) and the OS's XTILECFG state (bit 17).
  const bool os_tile = xcr0 & (1ull << 17);
  if (!f.avx512 || !os_tile) f.amx_tile = f.amx_bf16 = f.amx_int8 = false;
  f.amx_bf16 = f.amx_bf16 && f.amx_tile;
  f.amx_int8 = f.amx_int8 && f.amx_tile;
  return f;
}

enum Level { kNone, kAvx2, kAvx512, kVnni, kBf16, kAmx, kUncapped };

Level ParseCap(const std::string& s) {
  auto is = [&](const char* v) { return strcasecmp(s.c_str(), v) == 0; };
  if (s.empty() || is("all") || is("default")) return kUncapped;
  if (is("amx") || is("avx512_core_amx")) return kAmx;
  if (is("avx512_bf16") || is("avx512_core_bf16")) return kBf16;
  if (is("avx512_vnni") || is("avx512_core_vnni")) return kVnni;
  if (is("avx512") || is("avx512_core")) return kAvx512;
  return kAvx2;  // AVX2, AVX2_VNNI, SSE41, ...: nothing of AVX-512
}

std::mutex g_mu;
std::string g_test_cap;
bool g_test_cap_set = false;

CpuFeatures Capped(const CpuFeatures& raw, Level cap) {
  CpuFeatures f = raw;
  if (cap < kAmx) f.amx_tile = f.amx_bf16 = f.amx_int8 = false;
  if (cap < kBf16) f.avx512_bf16 = false;
  if (cap < kVnni) f.avx512_vnni = false;
  if (cap < kAvx512) f.avx512 = false;
  if (cap < kAvx2) f.avx2 = false;
  return f;
}

Level EnvCap() {
  if (const char* s = std::getenv("SLUICE_CPU_MAX_ISA")) return ParseCap(s);
  if (const char* s = std::getenv("ONEDNN_MAX_CPU_ISA")) return ParseCap(s);
  if (const char* s = std::getenv("DNNL_MAX_CPU_ISA")) return ParseCap(s);
  return kUncapped;
}

CpuFeatures g_features;

}  // namespace

const CpuFeatures& RawFeatures() {
  static const CpuFeatures raw = Detect();
  return raw;
}

const CpuFeatures& Features() {
  static std::once_flag once;
  std::call_once(once, [] { g_features = Capped(RawFeatures(), EnvCap()); });
  return g_features;
}

void SetMaxIsaForTesting(const std::string& isa) {
  Features();
  std::lock_guard<std::mutex> lock(g_mu);
  g_test_cap = isa;
  g_test_cap_set = !isa.empty();
  g_features = Capped(RawFeatures(), g_test_cap_set ? ParseCap(isa) : EnvCap());
}

bool RequestAmxPermission() {
  if (!RawFeatures().amx_tile) return false;
  static const bool granted = [] {
    constexpr long kArchGetXcompPerm = 0x1022, kArchReqXcompPerm = 0x1023;
    constexpr int kXfeatureXtiledata = 18;
    if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0) return false;
    unsigned long bitmask = 0;
    if (syscall(SYS_arch_prctl, kArchGetXcompPerm, &bitmask) != 0) return false;
    return (bitmask & (1ul << kXfeatureXtiledata)) != 0;
  }();
  return granted;
}

std::string FeatureSummary() {
  const CpuFeatures& f = Features();
  std::string s = f.amx_tile      ? "amx"
                  : f.avx512_bf16 ? "avx512_bf16"
                  : f.avx512      ? "avx512"
                  : f.avx2        ? "avx2"
                                  : "baseline";
  if (f.avx512_vnni && !f.amx_tile) s += "+vnni";
  return s;
}

}  // namespace sluice::cpu
