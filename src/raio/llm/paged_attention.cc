#include "raio/llm/paged_attention.h"

#include <ATen/Parallel.h>

#include <cmath>
#include <stdexcept>

namespace raio::llm::internal {
namespace {

constexpr int64_t kMaxFusedHeads = 4;  // query heads per kv head computed together

// kHs > 0 fixes the head size at compile time, so that the inner loops unroll and
// vectorise; 0 reads it from `hs_arg`.
template <typename T, int kHs>
void Attend(const T* q, const T* k, const T* v, T* out, const std::vector<QueryToken>& tokens,
            int64_t H, int64_t KVH, int64_t hs_arg, int block_size) {
  const int64_t hs = kHs > 0 ? kHs : hs_arg;
  const int64_t G = H / KVH;
  const T inv_sqrt = std::sqrt(static_cast<T>(hs));
  at::parallel_for(0, static_cast<int64_t>(tokens.size()), 1, [&](int64_t begin, int64_t end) {
    std::vector<T> att;
    std::vector<const T*> vp;
    for (int64_t t = begin; t < end; ++t) {
      const QueryToken& qt = tokens[t];
      const int64_t n = qt.pos + 1;
      att.resize(G * n);
      vp.resize(n);
      for (int64_t kvh = 0; kvh < KVH; ++kvh) {
        for (int64_t j = 0, b = 0; j < n; ++b) {
          const int64_t base = int64_t{qt.block_table[b]} * block_size;
          for (int64_t r = 0; r < block_size && j < n; ++r, ++j) {
            vp[j] = v + ((base + r) * KVH + kvh) * hs;
          }
        }
        // Scores of all G query heads sharing this kv head. Keys are stored transposed
        // per block ([block][kv head][dim][position]), so the inner loop runs over a
        // block's contiguous positions and vectorises; each position still sums its dot
        // product in the reference's order (dimension by dimension).
        const T* qg = q + (t * H + kvh * G) * hs;
        std::fill(att.begin(), att.end(), T(0));
        for (int64_t j0 = 0, b = 0; j0 < n; j0 += block_size, ++b) {
          const int64_t m = std::min<int64_t>(block_size, n - j0);
          const T* kb = k + (int64_t{qt.block_table[b]} * KVH + kvh) * hs * block_size;
          for (int64_t g = 0; g < G; ++g) {
            const T* __restrict qh = qg + g * hs;
            T* __restrict a = att.data() + g * n + j0;
            for (int64_t i = 0; i < hs; ++i) {
              const T qi = qh[i];
              const T* __restrict row = kb + i * block_size;
              for (int64_t r = 0; r < m; ++r) a[r] += qi * row[r];
            }
          }
        }
        for (int64_t j = 0; j < G * n; ++j) att[j] /= inv_sqrt;
        for (int64_t g = 0; g < G; ++g) {
          const int64_t h = kvh * G + g;
          T* __restrict a = att.data() + g * n;
          T mx = -INFINITY;
          for (int64_t j = 0; j < n; ++j) mx = std::max(mx, a[j]);
          T sum = 0;
          for (int64_t j = 0; j < n; ++j) sum += (a[j] = std::exp(a[j] - mx));
          for (int64_t j = 0; j < n; ++j) a[j] /= sum;
          if (kHs > 0 && G <= kMaxFusedHeads) continue;  // fused output loop below
          // Accumulate in locals (registers when the head size is a constant): `o` could
          // alias the cache as far as the compiler knows.
          T acc[kHs > 0 ? kHs : 256] = {};
          for (int64_t j = 0; j < n; ++j) {
            const T aj = a[j];
            const T* vj = vp[j];
            for (int64_t i = 0; i < hs; ++i) acc[i] += aj * vj[i];
          }
          std::copy(acc, acc + hs, out + (t * H + h) * hs);
        }
        if (kHs > 0 && G <= kMaxFusedHeads) {
          // The G heads' outputs together, reading each value row once.
          T acc[kMaxFusedHeads][kHs > 0 ? kHs : 1] = {};
          for (int64_t j = 0; j < n; ++j) {
            const T* __restrict vj = vp[j];
            for (int64_t g = 0; g < G; ++g) {
              const T aj = att[g * n + j];
              for (int64_t i = 0; i < kHs; ++i) acc[g][i] += aj * vj[i];
            }
          }
          for (int64_t g = 0; g < G; ++g) {
            std::copy(acc[g], acc[g] + kHs, out + (t * H + kvh * G + g) * kHs);
          }
        }
      }
    }
  });
}

}  // namespace

at::Tensor PagedAttentionCpu(const at::Tensor& q_in, const at::Tensor& k_cache,
                             const at::Tensor& v_cache, const std::vector<QueryToken>& tokens,
                             int block_size) {
  at::Tensor q = q_in.contiguous();
  const int64_t T = q.size(0), H = q.size(1), hs = q.size(2), KVH = k_cache.size(1);
  // k_cache: [num_blocks, KVH, hs, block_size]; v_cache: [slots, KVH, hs].
  at::Tensor out = at::empty({T, H * hs}, q.options());
  if (hs > 256) throw std::invalid_argument("PagedAttentionCpu: head size over 256");
  if (q.scalar_type() == at::kDouble) {
    Attend<double, 0>(q.data_ptr<double>(), k_cache.data_ptr<double>(), v_cache.data_ptr<double>(),
                      out.data_ptr<double>(), tokens, H, KVH, hs, block_size);
    return out;
  }
  auto run = [&](auto kernel) {
    kernel(q.data_ptr<float>(), k_cache.data_ptr<float>(), v_cache.data_ptr<float>(),
           out.data_ptr<float>(), tokens, H, KVH, hs, block_size);
  };
  switch (hs) {
    case 8:
      run(Attend<float, 8>);
      break;
    case 16:
      run(Attend<float, 16>);
      break;
    case 32:
      run(Attend<float, 32>);
      break;
    case 64:
      run(Attend<float, 64>);
      break;
    case 128:
      run(Attend<float, 128>);
      break;
    default:
      run(Attend<float, 0>);
      break;
  }
  return out;
}

namespace {

template <typename T>
void RmsNormImpl(const T* x, const T* w, T* out, int64_t rows, int64_t n, double eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * n;
    T ss = 0;
    for (int64_t i = 0; i < n; ++i) ss += xr[i] * xr[i];
    ss = T(1) / std::sqrt(ss / static_cast<T>(n) + static_cast<T>(eps));
    for (int64_t i = 0; i < n; ++i) out[r * n + i] = w[i] * (ss * xr[i]);
  }
}

template <typename T>
void RopeImpl(const T* qkv, const T* cos, const T* sin, const std::vector<QueryToken>& tokens,
              const std::vector<int64_t>& slots, T* kc, T* vc, T* q, int64_t H, int64_t KVH,
              int64_t hs, int64_t bs) {
  std::vector<T> key(KVH * hs);
  const int64_t dim = H * hs, kv = KVH * hs, row = dim + 2 * kv, half = hs / 2;
  for (size_t t = 0; t < tokens.size(); ++t) {
    const T* in = qkv + t * row;
    const T* c = cos + tokens[t].pos * half;
    const T* s = sin + tokens[t].pos * half;
    auto rotate = [&](const T* src, T* dst, int64_t n) {
      for (int64_t i = 0; i < n; i += 2) {
        const int64_t f = (i % hs) / 2;
        const T x0 = src[i], x1 = src[i + 1];
        dst[i] = x0 * c[f] - x1 * s[f];
        dst[i + 1] = x0 * s[f] + x1 * c[f];
      }
    };
    rotate(in, q + t * dim, dim);
    rotate(in + dim, key.data(), kv);
    const int64_t block = slots[t] / bs, r = slots[t] % bs;
    for (int64_t h = 0; h < KVH; ++h) {
      for (int64_t i = 0; i < hs; ++i) kc[((block * KVH + h) * hs + i) * bs + r] = key[h * hs + i];
    }
    std::copy(in + dim + kv, in + row, vc + slots[t] * kv);
  }
}

template <typename T>
void SwiGluImpl(const T* gu, T* out, int64_t rows, int64_t h) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < h; ++i) {
      const T g = gu[r * 2 * h + i];
      out[r * h + i] = g / (T(1) + std::exp(-g)) * gu[r * 2 * h + h + i];
    }
  }
}

}  // namespace

at::Tensor RmsNormCpu(const at::Tensor& x_in, const at::Tensor& w, double eps) {
  at::Tensor x = x_in.contiguous();
  at::Tensor out = at::empty_like(x);
  if (x.scalar_type() == at::kDouble) {
    RmsNormImpl(x.data_ptr<double>(), w.data_ptr<double>(), out.data_ptr<double>(), x.size(0),
                x.size(1), eps);
  } else {
    RmsNormImpl(x.data_ptr<float>(), w.data_ptr<float>(), out.data_ptr<float>(), x.size(0),
                x.size(1), eps);
  }
  return out;
}

at::Tensor RopeAndCacheCpu(const at::Tensor& qkv_in, const at::Tensor& cos, const at::Tensor& sin,
                           const std::vector<QueryToken>& tokens, const std::vector<int64_t>& slots,
                           at::Tensor& k_cache, at::Tensor& v_cache, int64_t n_heads) {
  at::Tensor qkv = qkv_in.contiguous();
  const int64_t KVH = k_cache.size(1), hs = k_cache.size(2), bs = k_cache.size(3);
  at::Tensor q = at::empty({qkv.size(0), n_heads, hs}, qkv.options());
  if (qkv.scalar_type() == at::kDouble) {
    RopeImpl(qkv.data_ptr<double>(), cos.data_ptr<double>(), sin.data_ptr<double>(), tokens, slots,
             k_cache.data_ptr<double>(), v_cache.data_ptr<double>(), q.data_ptr<double>(), n_heads,
             KVH, hs, bs);
  } else {
    RopeImpl(qkv.data_ptr<float>(), cos.data_ptr<float>(), sin.data_ptr<float>(), tokens, slots,
             k_cache.data_ptr<float>(), v_cache.data_ptr<float>(), q.data_ptr<float>(), n_heads,
             KVH, hs, bs);
  }
  return q;
}

at::Tensor SwiGluCpu(const at::Tensor& gu_in) {
  at::Tensor gu = gu_in.contiguous();
  const int64_t h = gu.size(1) / 2;
  at::Tensor out = at::empty({gu.size(0), h}, gu.options());
  if (gu.scalar_type() == at::kDouble) {
    SwiGluImpl(gu.data_ptr<double>(), out.data_ptr<double>(), gu.size(0), h);
  } else {
    SwiGluImpl(gu.data_ptr<float>(), out.data_ptr<float>(), gu.size(0), h);
  }
  return out;
}

}  // namespace raio::llm::internal
