// A plain single-sequence, single-threaded Llama forward pass with a KV cache, in the
// style of llama2.c's run.c: loops over float arrays, no libtorch. The tests use it as
// the oracle for the batched libtorch model; bench/llm uses it as the baseline.
// Thread-compatible: one instance per thread.
#pragma once

#include <cmath>
#include <vector>

#include "raio/llm/weights.h"

namespace raio::llm::testing {

// T is float (llama2.c's arithmetic) or double (an oracle with far smaller rounding).
template <typename T>
class ReferenceLlamaT {
 public:
  explicit ReferenceLlamaT(const ModelWeights& w) : c_(w.config) {
    for (auto [dst, src] : {std::pair{&emb_, &w.token_embedding},
                            {&rms_att_, &w.rms_att},
                            {&wq_, &w.wq},
                            {&wk_, &w.wk},
                            {&wv_, &w.wv},
                            {&wo_, &w.wo},
                            {&rms_ffn_, &w.rms_ffn},
                            {&w1_, &w.w1},
                            {&w2_, &w.w2},
                            {&w3_, &w.w3},
                            {&rms_final_, &w.rms_final},
                            {&cls_, &w.Classifier()}}) {
      dst->assign(src->begin(), src->end());
    }
    const int64_t L = c_.n_layers, S = c_.max_seq_len;
    key_cache_.assign(L * S * c_.kv_dim(), 0.0f);
    value_cache_.assign(L * S * c_.kv_dim(), 0.0f);
    x_.resize(c_.dim), xb_.resize(c_.dim), xb2_.resize(c_.dim), q_.resize(c_.dim);
    hb_.resize(c_.hidden_dim), hb2_.resize(c_.hidden_dim), att_.resize(S);
    logits_.resize(c_.vocab_size);
  }

  // Logits [vocab] after feeding `token` at position `pos` (positions 0..pos-1 must have
  // been fed before, in order).
  const std::vector<T>& Forward(int token, int pos) {
    const int64_t dim = c_.dim, kv_dim = c_.kv_dim(), hs = c_.head_size(), hidden = c_.hidden_dim;
    const int64_t kv_mul = c_.n_heads / c_.n_kv_heads, S = c_.max_seq_len;
    std::copy_n(emb_.begin() + token * dim, dim, x_.begin());
    for (int64_t l = 0; l < c_.n_layers; ++l) {
      RmsNorm(xb_.data(), x_.data(), rms_att_.data() + l * dim, dim);
      T* k = key_cache_.data() + (l * S + pos) * kv_dim;
      T* v = value_cache_.data() + (l * S + pos) * kv_dim;
      MatVec(q_.data(), xb_.data(), wq_.data() + l * dim * dim, dim, dim);
      MatVec(k, xb_.data(), wk_.data() + l * kv_dim * dim, dim, kv_dim);
      MatVec(v, xb_.data(), wv_.data() + l * kv_dim * dim, dim, kv_dim);
      for (int64_t i = 0; i < dim; i += 2) {
        T freq = T(1) / std::pow(static_cast<T>(c_.rope_theta),
                                 static_cast<T>(i % hs) / static_cast<T>(hs));
        T val = static_cast<T>(pos) * freq;
        T fcr = std::cos(val), fci = std::sin(val);
        for (int rot = 0; rot < (i < kv_dim ? 2 : 1); ++rot) {
          T* vec = rot == 0 ? q_.data() : k;
          T v0 = vec[i], v1 = vec[i + 1];
          vec[i] = v0 * fcr - v1 * fci;
          vec[i + 1] = v0 * fci + v1 * fcr;
        }
      }
      for (int64_t h = 0; h < c_.n_heads; ++h) {
        const T* qh = q_.data() + h * hs;
        for (int t = 0; t <= pos; ++t) {
          const T* kt = key_cache_.data() + (l * S + t) * kv_dim + (h / kv_mul) * hs;
          T score = 0;
          for (int64_t i = 0; i < hs; ++i) score += qh[i] * kt[i];
          att_[t] = score / std::sqrt(static_cast<T>(hs));
        }
        Softmax(att_.data(), pos + 1);
        T* out = xb_.data() + h * hs;
        std::fill(out, out + hs, T(0));
        for (int t = 0; t <= pos; ++t) {
          const T* vt = value_cache_.data() + (l * S + t) * kv_dim + (h / kv_mul) * hs;
          for (int64_t i = 0; i < hs; ++i) out[i] += att_[t] * vt[i];
        }
      }
      MatVec(xb2_.data(), xb_.data(), wo_.data() + l * dim * dim, dim, dim);
      for (int64_t i = 0; i < dim; ++i) x_[i] += xb2_[i];
      RmsNorm(xb_.data(), x_.data(), rms_ffn_.data() + l * dim, dim);
      MatVec(hb_.data(), xb_.data(), w1_.data() + l * hidden * dim, dim, hidden);
      MatVec(hb2_.data(), xb_.data(), w3_.data() + l * hidden * dim, dim, hidden);
      for (int64_t i = 0; i < hidden; ++i) {
        T g = hb_[i];
        hb_[i] = g / (T(1) + std::exp(-g)) * hb2_[i];
      }
      MatVec(xb_.data(), hb_.data(), w2_.data() + l * dim * hidden, hidden, dim);
      for (int64_t i = 0; i < dim; ++i) x_[i] += xb_[i];
    }
    RmsNorm(x_.data(), x_.data(), rms_final_.data(), dim);
    MatVec(logits_.data(), x_.data(), cls_.data(), dim, c_.vocab_size);
    return logits_;
  }

  static int Argmax(const std::vector<T>& v) {
    int best = 0;
    for (size_t i = 1; i < v.size(); ++i) {
      if (v[i] > v[best]) best = static_cast<int>(i);
    }
    return best;
  }

 private:
  void RmsNorm(T* out, const T* x, const T* w, int64_t n) const {
    T ss = 0;
    for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
    ss = T(1) / std::sqrt(ss / static_cast<T>(n) + static_cast<T>(c_.norm_eps));
    for (int64_t i = 0; i < n; ++i) out[i] = w[i] * (ss * x[i]);
  }
  static void Softmax(T* x, int n) {
    T mx = x[0];
    for (int i = 1; i < n; ++i) mx = std::max(mx, x[i]);
    T sum = 0;
    for (int i = 0; i < n; ++i) sum += (x[i] = std::exp(x[i] - mx));
    for (int i = 0; i < n; ++i) x[i] /= sum;
  }
  // out[d] = W[d][n] . x[n]
  static void MatVec(T* out, const T* x, const T* w, int64_t n, int64_t d) {
    for (int64_t i = 0; i < d; ++i) {
      T acc = 0;
      for (int64_t j = 0; j < n; ++j) acc += w[i * n + j] * x[j];
      out[i] = acc;
    }
  }

  const ModelConfig c_;
  std::vector<T> emb_, rms_att_, wq_, wk_, wv_, wo_, rms_ffn_, w1_, w2_, w3_, rms_final_, cls_;
  std::vector<T> key_cache_, value_cache_;  // [L][seq][kv_dim]
  std::vector<T> x_, xb_, xb2_, q_, hb_, hb2_, att_, logits_;
};

using ReferenceLlama = ReferenceLlamaT<float>;

}  // namespace raio::llm::testing
