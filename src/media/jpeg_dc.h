// A JPEG decoder for one case only: baseline sequential Huffman JPEGs decoded at 1/8 scale,
// producing exactly (bit for bit) what libjpeg-turbo 2.1.5 (x86-64 SIMD build) gives for
// scale_num = 1, scale_denom = 8, out_color_space JCS_RGB (JCS_GRAYSCALE replicated to RGB),
// default do_fancy_upsampling and dct_method.
//
// At that scale libjpeg-turbo runs a 1x1 IDCT (the DC coefficient) on every component whose
// sampling equals the largest, and on a component subsampled 2x2 (4:2:0 chroma) a 2x2 reduced
// IDCT (its SIMD jsimd_idct_2x2, which reads the AC coefficients of rows and columns 1, 3, 5
// and 7); components subsampled in one direction only get a 1x1 IDCT and box replication
// (fancy upsampling is off when the smallest DCT size is 1); then YCbCr -> RGB with its integer
// tables. Most of the work of a 1/8 decode is Huffman-decoding AC coefficients that are then
// thrown away: here every symbol is still parsed (it must be, to find the next one), but the
// AC coefficients of blocks whose output needs only the DC are skipped without computing their
// values (one table look-up gives code length + extra bits and the zero run).
//
// Handled: SOF0/SOF1, 8-bit, 1 component (grayscale) or 3 components in YCbCr (a JFIF marker,
// an Adobe marker with transform 1, or component ids 1, 2, 3 and neither marker), sampling
// factors 1 or 2, at most 10 blocks per MCU, one or several scans (each component in exactly
// one scan), DRI restart intervals with the markers in order, DHT/DQT/DRI anywhere before a
// scan, APPn and COM skipped, the last scan followed by EOI. Everything else — progressive,
// arithmetic coding, 12-bit, lossless, CMYK/YCCK/RGB, other sampling factors, undefined tables,
// invalid Huffman tables or codes, coefficients past the end of a block, restart markers out of
// order, data that runs out or has garbage where a marker belongs — is "not handled": the
// caller decodes with libjpeg-turbo, whose result and errors are then the same as before.
//
// Memory-safe on any input: every read is bounds-checked; the entropy decoder reads from a
// copy of the scan with zero padding and checks its position once per MCU.
#pragma once

#include <string_view>

#include "media/image.h"

namespace sluice::media {

// Decodes `bytes` at 1/8 scale into *out (RGB, 3 bytes per pixel, no EXIF orientation
// applied) and returns true, or returns false (out unspecified) when the file is not one
// this decoder handles or is larger than `limits` allows (checked before allocating).
bool DecodeJpegEighth(std::string_view bytes, const DecodeOptions& limits, Image* out);

}  // namespace sluice::media
