#include "backend/cpu/reference.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace sluice::cpu::ref {
namespace {

float* Row(const Tensor& t, int64_t r) { return t.ptr<float>() + r * t.row_stride(); }

double TableAt(const Tensor& t, int64_t r, int64_t c) {
  const int64_t i = r * t.row_stride() + c;
  switch (t.dtype) {
    case DType::kBF16:
      return BF16ToF32(t.ptr<uint16_t>()[i]);
    case DType::kF16:
      return F16ToF32(t.ptr<uint16_t>()[i]);
    default:
      return t.ptr<float>()[i];
  }
}

}  // namespace

double Act(double x, Activation act) {
  constexpr double kPi = 3.14159265358979323846;
  switch (act) {
    case Activation::kGeluErf:
      return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
    case Activation::kGeluTanh:
      return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / kPi) * (x + 0.044715 * x * x * x)));
    case Activation::kSilu:
      return x / (1.0 + std::exp(-x));
    case Activation::kRelu:
      return x > 0 ? x : 0.0;
    case Activation::kQuickGelu:
      return x / (1.0 + std::exp(-1.702 * x));
    case Activation::kNone:
      break;
  }
  return x;
}

void Linear(const float* x, int64_t m, int64_t k, const float* w, const float* b, int64_t n,
            Activation act, const float* residual, float* out) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double acc = b ? b[j] : 0.0;
      for (int64_t c = 0; c < k; ++c) acc += static_cast<double>(x[i * k + c]) * w[j * k + c];
      acc = Act(acc, act);
      if (residual) acc += residual[i * n + j];
      out[i * n + j] = static_cast<float>(acc);
    }
  }
}

void Activate(const Tensor& x, Activation act) {
  for (int64_t r = 0; r < x.rows; ++r) {
    for (int64_t c = 0; c < x.cols; ++c) Row(x, r)[c] = static_cast<float>(Act(Row(x, r)[c], act));
  }
}

void GatedActivate(const Tensor& gate_up, Activation act, const Tensor& out) {
  const int64_t n = out.cols;
  for (int64_t r = 0; r < out.rows; ++r) {
    for (int64_t c = 0; c < n; ++c) {
      Row(out, r)[c] = static_cast<float>(Act(Row(gate_up, r)[c], act) * Row(gate_up, r)[n + c]);
    }
  }
}

void Add(const Tensor& a, const Tensor& b, const Tensor& out) {
  for (int64_t r = 0; r < out.rows; ++r) {
    for (int64_t c = 0; c < out.cols; ++c) Row(out, r)[c] = Row(a, r)[c] + Row(b, r)[c];
  }
}

void LayerNorm(const Tensor& x, const Tensor* residual, const Tensor& gamma, const Tensor* beta,
               float eps, const Tensor& out) {
  const int64_t n = x.cols;
  std::vector<double> v(n);
  for (int64_t r = 0; r < x.rows; ++r) {
    double mean = 0;
    for (int64_t c = 0; c < n; ++c) {
      v[c] = static_cast<double>(Row(x, r)[c]) + (residual ? Row(*residual, r)[c] : 0.f);
      mean += v[c];
    }
    mean /= n;
    double var = 0;
    for (int64_t c = 0; c < n; ++c) var += (v[c] - mean) * (v[c] - mean);
    var /= n;
    const double rstd = 1.0 / std::sqrt(var + eps);
    for (int64_t c = 0; c < n; ++c) {
      const double b = beta ? beta->ptr<float>()[c] : 0.0;
      Row(out, r)[c] = static_cast<float>((v[c] - mean) * rstd * gamma.ptr<float>()[c] + b);
    }
  }
}

void RmsNorm(const Tensor& residual, const Tensor* delta, const Tensor& weight, float eps,
             const Tensor& out, int group) {
  const int64_t n = residual.cols, g = group > 0 ? group : n;
  for (int64_t r = 0; r < residual.rows; ++r) {
    float* x = Row(residual, r);
    if (delta) {
      for (int64_t c = 0; c < n; ++c) x[c] += Row(*delta, r)[c];
    }
    for (int64_t g0 = 0; g0 < n; g0 += g) {
      double ss = 0;
      for (int64_t c = 0; c < g; ++c) ss += static_cast<double>(x[g0 + c]) * x[g0 + c];
      const double rs = 1.0 / std::sqrt(ss / g + eps);
      for (int64_t c = 0; c < g; ++c) {
        Row(out, r)[g0 + c] = static_cast<float>(x[g0 + c] * rs * weight.ptr<float>()[c]);
      }
    }
  }
}

void Rope(const RopeParams& p) {
  const int rot = p.rotary_dim > 0 ? p.rotary_dim : p.head_dim;
  const int half = rot / 2;
  for (int64_t t = 0; t < p.x.rows; ++t) {
    for (int h = 0; h < p.num_heads; ++h) {
      float* x = Row(p.x, t) + static_cast<int64_t>(h) * p.head_dim;
      for (int i = 0; i < half; ++i) {
        // float32 inv_freq and angle as Hugging Face computes them.
        const float inv = 1.0f / std::pow(static_cast<float>(p.theta),
                                          static_cast<float>(2 * i) / static_cast<float>(rot));
        const double ang = static_cast<float>(p.positions[t]) * inv;
        const double c = std::cos(ang), s = std::sin(ang);
        const int a = p.style == RopeStyle::kNeox ? i : 2 * i;
        const int b = p.style == RopeStyle::kNeox ? i + half : 2 * i + 1;
        const double xa = x[a], xb = x[b];
        x[a] = static_cast<float>(xa * c - xb * s);
        x[b] = static_cast<float>(xb * c + xa * s);
      }
    }
  }
}

void Attention(const AttentionParams& p) {
  const int group = p.num_heads / p.num_kv_heads, dim = p.head_dim;
  for (int s = 0; s < p.num_seqs; ++s) {
    const int base = p.cu_seqlens[s], len = p.cu_seqlens[s + 1] - base;
    const int keys = p.key_lens != nullptr ? std::min(len, p.key_lens[s]) : len;
    std::vector<double> sc(len);
    for (int h = 0; h < p.num_heads; ++h) {
      const int kvh = h / group;
      for (int i = 0; i < len; ++i) {
        const float* q = Row(p.q, base + i) + h * dim;
        double mx = -1e300;
        for (int j = 0; j < len; ++j) {
          bool ok = p.causal ? j <= i : true;
          if (p.window > 0) ok = ok && std::abs(i - j) < p.window;
          ok = ok && j < keys;
          if (!ok) {
            sc[j] = -1e300;
            continue;
          }
          const float* k = Row(p.k, base + j) + kvh * dim;
          double dot = 0;
          for (int c = 0; c < dim; ++c) dot += static_cast<double>(q[c]) * k[c];
          sc[j] = dot * p.scale;
          mx = std::max(mx, sc[j]);
        }
        double sum = 0;
        for (int j = 0; j < len; ++j) {
          sc[j] = sc[j] <= -1e299 ? 0.0 : std::exp(sc[j] - mx);
          sum += sc[j];
        }
        float* o = Row(p.out, base + i) + h * dim;
        for (int c = 0; c < dim; ++c) {
          double acc = 0;
          for (int j = 0; j < len; ++j) acc += sc[j] * Row(p.v, base + j)[kvh * dim + c];
          o[c] = sum > 0 ? static_cast<float>(acc / sum) : 0.f;  // no key visible: zeros
        }
      }
    }
  }
}

void EmbeddingGather(const Tensor& table, const int32_t* ids, int64_t n, const Tensor& out,
                     bool accumulate) {
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t c = 0; c < out.cols; ++c) {
      const double v = TableAt(table, ids[i], c);
      Row(out, i)[c] = static_cast<float>(accumulate ? Row(out, i)[c] + v : v);
    }
  }
}

void GatherRows(const Tensor& x, const int32_t* rows, int64_t n, const Tensor& out) {
  const size_t es = DTypeSize(x.dtype);
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(static_cast<char*>(out.data) + i * out.row_stride() * es,
                static_cast<const char*>(x.data) + rows[i] * x.row_stride() * es, out.cols * es);
  }
}

void Pool(const PoolParams& p) {
  for (int s = 0; s < p.num_seqs; ++s) {
    const int b = p.cu_seqlens[s], len = p.cu_seqlens[s + 1] - b;
    for (int64_t c = 0; c < p.out.cols; ++c) {
      double v = 0;
      if (len > 0) {
        switch (p.mode) {
          case PoolMode::kCls:
            v = Row(p.hidden, b)[c];
            break;
          case PoolMode::kLast:
            v = Row(p.hidden, b + len - 1)[c];
            break;
          case PoolMode::kMean:
            for (int r = 0; r < len; ++r) v += Row(p.hidden, b + r)[c];
            v /= len;
            break;
          case PoolMode::kMax:
            v = Row(p.hidden, b)[c];
            for (int r = 1; r < len; ++r) v = std::max<double>(v, Row(p.hidden, b + r)[c]);
            break;
        }
      }
      Row(p.out, s)[c] = static_cast<float>(v);
    }
  }
}

}  // namespace sluice::cpu::ref
