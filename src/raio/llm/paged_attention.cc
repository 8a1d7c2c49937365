#include "raio/llm/paged_attention.h"

#include <ATen/Parallel.h>

#include <cmath>

namespace raio::llm::internal {
namespace {

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
    std::vector<const T*> kp, vp;
    for (int64_t t = begin; t < end; ++t) {
      const QueryToken& qt = tokens[t];
      const int64_t n = qt.pos + 1;
      att.resize(n);
      kp.resize(n);
      vp.resize(n);
      for (int64_t kvh = 0; kvh < KVH; ++kvh) {
        for (int64_t j = 0, b = 0; j < n; ++b) {
          const int64_t base = int64_t{qt.block_table[b]} * block_size;
          for (int64_t r = 0; r < block_size && j < n; ++r, ++j) {
            kp[j] = k + ((base + r) * KVH + kvh) * hs;
            vp[j] = v + ((base + r) * KVH + kvh) * hs;
          }
        }
        for (int64_t g = 0; g < G; ++g) {
          const int64_t h = kvh * G + g;
          const T* qh = q + (t * H + h) * hs;
          // Dimension-outer, position-inner: each position's dot product is one chain
          // (summed in the reference's order), and the chains of different positions
          // overlap instead of waiting on each other's additions.
          std::fill(att.begin(), att.end(), T(0));
          for (int64_t i = 0; i < hs; ++i) {
            const T qi = qh[i];
            for (int64_t j = 0; j < n; ++j) att[j] += qi * kp[j][i];
          }
          T mx = -INFINITY;
          for (int64_t j = 0; j < n; ++j) {
            att[j] /= inv_sqrt;
            mx = std::max(mx, att[j]);
          }
          T sum = 0;
          for (int64_t j = 0; j < n; ++j) sum += (att[j] = std::exp(att[j] - mx));
          for (int64_t j = 0; j < n; ++j) att[j] /= sum;
          T* o = out + (t * H + h) * hs;
          for (int64_t i = 0; i < hs; ++i) o[i] = 0;
          for (int64_t j = 0; j < n; ++j) {
            for (int64_t i = 0; i < hs; ++i) o[i] += att[j] * vp[j][i];
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
  at::Tensor out = at::empty({T, H * hs}, q.options());
  if (q.scalar_type() == at::kDouble) {
    Attend<double, 0>(q.data_ptr<double>(), k_cache.data_ptr<double>(),
                      v_cache.data_ptr<double>(), out.data_ptr<double>(), tokens, H, KVH, hs,
                      block_size);
    return out;
  }
  auto run = [&](auto kernel) {
    kernel(q.data_ptr<float>(), k_cache.data_ptr<float>(), v_cache.data_ptr<float>(),
           out.data_ptr<float>(), tokens, H, KVH, hs, block_size);
  };
  switch (hs) {
    case 8: run(Attend<float, 8>); break;
    case 16: run(Attend<float, 16>); break;
    case 32: run(Attend<float, 32>); break;
    case 64: run(Attend<float, 64>); break;
    case 128: run(Attend<float, 128>); break;
    default: run(Attend<float, 0>); break;
  }
  return out;
}

}  // namespace raio::llm::internal
