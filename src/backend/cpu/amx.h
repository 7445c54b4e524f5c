// Intel AMX (tiles, tdpbf16ps / tdpbusd) for the CPU backend: availability (CPU + Linux
// permission, cpu_features.h), and the peak-throughput loops of bench/isa_peak_bench.
// Nothing here executes an AMX instruction unless Available() returned true.
#pragma once

#include <cstdint>

namespace sluice::cpu::amx {

// CPU has AMX-TILE (after the ISA cap), the OS saves tile state, and Linux granted this
// process XTILEDATA (arch_prctl ARCH_REQ_XCOMP_PERM, requested once here).
bool Available();

// ldtilecfg with palette 1 and tiles 0..7 of 16 rows x 64 bytes (zeroes every tile), as all
// of sluice's AMX code uses them. Call only when Available(); release with _tile_release().
void ConfigureSquareTiles();

// Peak loops: 4 accumulator tiles, 4 operand tiles loaded once, `iters` x 4 tile
// multiply-adds (16 x 16 x 32 bf16 or 16 x 16 x 64 int8 each). Returns the flops (ops) done.
// Call only when Available() (and amx_bf16 / amx_int8).
double PeakLoopBf16(int64_t iters);
double PeakLoopInt8(int64_t iters);
// The same work with the operand tiles loaded from L1 every step, as the GEMM's schedules
// do: 1x4 (1 A + 4 B tile loads per 4 multiply-adds) or 2x2 (2 A + 2 B).
double LoadLoopBf16(int64_t iters, bool two_by_two);
double LoadLoopInt8(int64_t iters, bool two_by_two);
// int8 1x4 / 2x2 with each step's A tile(s) and weight step taken from buffers of a_kb and
// b_kb KiB in turn (wrapping): the tile loop against operands in L1, L2, L3 or memory.
// prefetch > 0: each step prefetches (prefetcht0) the lines of the step that many ahead.
double FootprintLoopInt8(int64_t iters, bool two_by_two, int64_t a_kb, int64_t b_kb,
                         int prefetch = 0);

}  // namespace sluice::cpu::amx
