#include "backend/cpu/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "backend/sampling_math.h"

namespace sluice::cpu {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

void SampleRow(const SampleParams& p, int r, std::vector<float>& raw, std::vector<int32_t>& order) {
  const SamplingRow& row = p.rows[r];
  const int64_t V = p.logits.cols;
  float* x = p.logits.ptr<float>() + r * p.logits.row_stride();
  SampledToken& out = p.out[r];

  // 1. Raw log-softmax normaliser and top raw logprobs.
  float m_raw = kNegInf;
  for (int64_t i = 0; i < V; ++i) m_raw = std::max(m_raw, x[i]);
  double sum = 0;
  for (int64_t i = 0; i < V; ++i) sum += std::exp(static_cast<double>(x[i] - m_raw));
  const float lse = m_raw + static_cast<float>(std::log(sum));
  out.num_top = std::min<int>(row.num_logprobs, static_cast<int>(V));
  if (out.num_top > 0) {
    order.resize(static_cast<size_t>(V));
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + out.num_top, order.end(),
                      [x](int32_t a, int32_t b) { return x[a] > x[b] || (x[a] == x[b] && a < b); });
    for (int k = 0; k < out.num_top; ++k) {
      out.top_ids[k] = order[k];
      out.top_logprobs[k] = x[order[k]] - lse;
    }
  }

  // 2. Adjustments (the raw logits are kept for the chosen token's logprob).
  raw.assign(x, x + V);
  for (int a = row.adjust_begin; a < row.adjust_end; ++a) {
    const SamplingAdjust& adj = p.adjusts[a];
    float& v = x[adj.token];
    if (adj.repeat) v = RepetitionPenalized(v, row.repetition_penalty);
    v += adj.add;
  }
  // 3. The structured-output mask.
  if (row.mask_row >= 0) {
    const uint32_t* m = p.masks + static_cast<int64_t>(row.mask_row) * p.mask_words;
    const int64_t covered = std::min<int64_t>(V, static_cast<int64_t>(p.mask_words) * 32);
    for (int64_t i = 0; i < covered; ++i) {
      if (!((m[i >> 5] >> (i & 31)) & 1u)) x[i] = kNegInf;
    }
    for (int64_t i = covered; i < V; ++i) x[i] = kNegInf;
  } else if (row.allowed_begin >= 0) {
    // A sparse allow-list: its (adjusted) logits kept, every other one -inf.
    thread_local std::vector<float> kept;
    kept.resize(static_cast<size_t>(std::max(0, row.allowed_end - row.allowed_begin)));
    for (int a = row.allowed_begin; a < row.allowed_end; ++a) {
      const int32_t t = p.allowed[a];
      kept[static_cast<size_t>(a - row.allowed_begin)] = t >= 0 && t < V ? x[t] : kNegInf;
    }
    std::fill(x, x + V, kNegInf);
    for (int a = row.allowed_begin; a < row.allowed_end; ++a) {
      const int32_t t = p.allowed[a];
      if (t >= 0 && t < V) x[t] = kept[static_cast<size_t>(a - row.allowed_begin)];
    }
  }

  int32_t token = 0;
  if (row.forced_token >= 0) {
    token = row.forced_token;
  } else if (row.temperature <= 0.f) {
    float best = kNegInf;
    token = 0;
    for (int64_t i = 0; i < V; ++i) {
      if (x[i] > best) {
        best = x[i];
        token = static_cast<int32_t>(i);
      }
    }
  } else {
    // 4. Temperature, top_k, softmax, top_p, min_p.
    for (int64_t i = 0; i < V; ++i) x[i] = x[i] / row.temperature;
    float thr = kNegInf;
    if (row.top_k > 0 && row.top_k < V) {
      std::vector<float> tmp(x, x + V);
      std::nth_element(tmp.begin(), tmp.begin() + (row.top_k - 1), tmp.end(), std::greater<>());
      thr = tmp[row.top_k - 1];
    }
    float m = kNegInf;
    for (int64_t i = 0; i < V; ++i) m = std::max(m, x[i]);
    // x becomes e (0 for tokens outside top_k or at -inf).
    double z = 0;
    for (int64_t i = 0; i < V; ++i) {
      const float e = (x[i] >= thr && x[i] != kNegInf) ? std::exp(x[i] - m) : 0.f;
      x[i] = e;
      z += e;
    }
    float tau = 0.f;  // keep e >= tau (and e > 0)
    if (row.top_p < 1.f) {
      order.resize(static_cast<size_t>(V));
      std::iota(order.begin(), order.end(), 0);
      std::sort(order.begin(), order.end(), [x](int32_t a, int32_t b) { return x[a] > x[b]; });
      const double limit = static_cast<double>(row.top_p) * z;
      double before = 0;  // mass of strictly larger tokens
      for (size_t i = 0; i < order.size() && x[order[i]] > 0.f;) {
        const float v = x[order[i]];
        if (before >= limit) break;
        tau = v;
        size_t j = i;
        double group = 0;
        while (j < order.size() && x[order[j]] == v) group += x[order[j++]];
        before += group;
        i = j;
      }
    }
    if (row.min_p > 0.f) tau = std::max(tau, row.min_p);
    double kept = 0;
    for (int64_t i = 0; i < V; ++i) {
      if (x[i] > 0.f && x[i] >= tau) kept += x[i];
    }
    const double target = static_cast<double>(UniformFloat(row.seed, row.counter)) * kept;
    double acc = 0;
    token = -1;
    int32_t last = 0;
    for (int64_t i = 0; i < V; ++i) {
      if (!(x[i] > 0.f && x[i] >= tau)) continue;
      last = static_cast<int32_t>(i);
      acc += x[i];
      if (acc > target) {
        token = last;
        break;
      }
    }
    if (token < 0) token = last;  // rounding: u * kept reached the total
  }
  out.token = token;
  out.logprob = raw[token] - lse;
}

}  // namespace

void SampleRows(const SampleParams& p) {
#pragma omp parallel
  {
    std::vector<float> raw;
    std::vector<int32_t> order;
#pragma omp for schedule(dynamic, 1)
    for (int r = 0; r < p.num_rows; ++r) SampleRow(p, r, raw, order);
  }
}

}  // namespace sluice::cpu
