// x86 CPU features for the hand-written kernels (AVX512-BF16, AVX512-VNNI, AMX), detected
// once with cpuid/xgetbv (instruction set *and* operating-system register state).
//
// A cap lowers what sluice's own kernels may use, to emulate a smaller machine (CI runs
// on AVX2-only CPUs): SLUICE_CPU_MAX_ISA=avx2|avx512|avx512_vnni|avx512_bf16|amx, or, when
// that is unset, oneDNN's ONEDNN_MAX_CPU_ISA (AVX2, AVX512_CORE, AVX512_CORE_VNNI,
// AVX512_CORE_BF16, AVX512_CORE_AMX; other values are read as AVX2), so one variable
// caps both oneDNN and sluice. Highway's kernels are capped separately (its targets).
#pragma once

#include <string>

namespace sluice::cpu {

struct CpuFeatures {
  bool avx2 = false;         // AVX2 + FMA, with OS YMM state
  bool avx512 = false;       // AVX-512 F/BW/VL/DQ, with OS ZMM state
  bool avx512_vnni = false;  // vpdpbusd
  bool avx512_bf16 = false;  // vdpbf16ps, vcvtne2ps2bf16
  bool amx_tile = false;     // CPU has AMX tiles (OS permission is requested separately)
  bool amx_bf16 = false;
  bool amx_int8 = false;
};

// The machine's features after the cap above; computed once.
const CpuFeatures& Features();
// The machine's features without any cap.
const CpuFeatures& RawFeatures();
// Tests only: replaces the cap ("" = back to the environment's).
void SetMaxIsaForTesting(const std::string& isa);

// Asks Linux for permission to use AMX tile data (arch_prctl ARCH_REQ_XCOMP_PERM); true if
// granted (or already granted). False without AMX or on kernels without the request.
bool RequestAmxPermission();

// e.g. "avx512_bf16+vnni" or "avx2"; what sluice's own kernels run on.
std::string FeatureSummary();

}  // namespace sluice::cpu
