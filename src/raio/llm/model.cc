#include "raio/llm/model.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/GradMode.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <map>

#include "absl/strings/str_cat.h"
#include "raio/llm/paged_attention.h"

namespace raio::llm {
namespace {

// The compute dtype of the model being built (float32 unless Options::float64).
thread_local at::ScalarType g_dtype = at::kFloat;

at::Tensor FromHost(const std::vector<float>& v, at::IntArrayRef shape, const at::Device& dev) {
  return at::from_blob(const_cast<float*>(v.data()), shape, at::kFloat)
      .to(dev, g_dtype, false, true);
}

at::Tensor Slice(const std::vector<float>& v, int64_t layer, at::IntArrayRef shape,
                 const at::Device& dev) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return at::from_blob(const_cast<float*>(v.data()) + layer * n, shape, at::kFloat)
      .to(dev, g_dtype, false, true);
}

// Rotary tables [max_seq_len, hs/2] computed as llama2.c does, in T's arithmetic.
template <typename T>
std::pair<at::Tensor, at::Tensor> RopeTables(const ModelConfig& c, at::ScalarType dtype) {
  const int64_t hs = c.head_size(), half = hs / 2;
  std::vector<T> cos(c.max_seq_len * half), sin(c.max_seq_len * half);
  for (int64_t pos = 0; pos < c.max_seq_len; ++pos) {
    for (int64_t i = 0; i < half; ++i) {
      T freq =
          T(1) / std::pow(static_cast<T>(c.rope_theta), static_cast<T>(2 * i) / static_cast<T>(hs));
      T val = static_cast<T>(pos) * freq;
      cos[pos * half + i] = std::cos(val);
      sin[pos * half + i] = std::sin(val);
    }
  }
  return {at::from_blob(cos.data(), {c.max_seq_len, half}, dtype).clone(),
          at::from_blob(sin.data(), {c.max_seq_len, half}, dtype).clone()};
}

// A copy of `v` on `dev` (one host-to-device copy on a GPU; a clone on the CPU).
at::Tensor Index(const std::vector<int64_t>& v, const at::Device& dev) {
  return at::from_blob(const_cast<int64_t*>(v.data()), {static_cast<int64_t>(v.size())}, at::kLong)
      .to(dev, at::kLong, /*non_blocking=*/false, /*copy=*/true);
}

// libtorch's message without the C++ backtrace that c10::Error appends.
std::string TorchError(const std::exception& e) {
  if (const auto* c10e = dynamic_cast<const c10::Error*>(&e)) return c10e->what_without_backtrace();
  return e.what();
}

}  // namespace

struct LlamaModel::Impl {
  ModelConfig config;
  Options options;
  at::Device device{at::kCPU};
  bool cpu_kernels = false;  // the loop kernels of paged_attention.h, not libtorch ops
  at::Tensor embedding;      // [vocab, dim]
  at::Tensor classifier;     // [dim, vocab] (transposed for mm)
  at::Tensor rms_final;      // [dim]
  struct Layer {
    at::Tensor rms_att, rms_ffn;  // [dim]
    at::Tensor wqkv_t;            // [dim, dim + 2 kv_dim]
    at::Tensor wo_t;              // [dim, dim]
    at::Tensor w13_t;             // [dim, 2 hidden]
    at::Tensor w2_t;              // [hidden, dim]
    // [num_blocks * block_size, n_kv_heads, head_size]; with the CPU kernels the keys are
    // [num_blocks, n_kv_heads, head_size, block_size] (see paged_attention.h).
    at::Tensor k_cache, v_cache;
  };
  std::vector<Layer> layers;
  at::Tensor cos, sin;  // [max_seq_len, head_size / 2]

  at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& w) const {
    at::Tensor ms = x.pow(2).mean(-1, /*keepdim=*/true);
    return x * at::rsqrt(ms + config.norm_eps) * w;
  }

  // Rotates pairs (2i, 2i+1) of each head: x [T, heads, hs]; cos/sin [T, 1, hs/2].
  static at::Tensor Rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
    at::Tensor p = x.reshape({x.size(0), x.size(1), x.size(2) / 2, 2});
    at::Tensor x0 = p.select(-1, 0), x1 = p.select(-1, 1);
    return at::stack({x0 * cos - x1 * sin, x0 * sin + x1 * cos}, -1).reshape(x.sizes());
  }
};

LlamaModel::LlamaModel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
LlamaModel::~LlamaModel() = default;
const ModelConfig& LlamaModel::config() const { return impl_->config; }
int LlamaModel::block_size() const { return impl_->options.block_size; }
int LlamaModel::num_blocks() const { return impl_->options.num_blocks; }

int64_t LlamaModel::BlockBytes(const ModelConfig& c, int block_size) {
  return 2 * c.n_layers * block_size * c.kv_dim() * static_cast<int64_t>(sizeof(float));
}

void SetTorchThreads(int n) { at::set_num_threads(n); }

absl::StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::Create(const ModelWeights& w,
                                                               const Options& options) {
  if (absl::Status s = w.Validate(); !s.ok()) return s;
  if (options.block_size <= 0 || options.num_blocks <= 0) {
    return absl::InvalidArgumentError("model: block_size and num_blocks must be > 0");
  }
  auto impl = std::make_unique<Impl>();
  try {
    impl->device = at::Device(options.device);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("model: bad device '", options.device, "'"));
  }
  if (impl->device.is_cuda()) {
    // hasCUDA is false when libtorch_cuda is not loaded: a CPU-only libtorch, or a binary
    // linked with --as-needed that dropped libtorch_cuda (link it with --no-as-needed).
    if (!at::hasCUDA()) return absl::UnavailableError("model: this libtorch build has no CUDA");
    const int64_t gpus = static_cast<int64_t>(at::getNumGPUs());
    if (impl->device.index() >= gpus) {
      return absl::InvalidArgumentError(
          absl::StrCat("model: device '", options.device, "' but CUDA sees ", gpus, " GPU(s)"));
    }
  } else if (!impl->device.is_cpu()) {
    return absl::InvalidArgumentError(
        absl::StrCat("model: device '", options.device, "': only cpu and cuda are supported"));
  }
  // Tensor work below throws c10::Error (out of device memory, driver errors).
  try {
    return Build(w, options, std::move(impl));
  } catch (const std::exception& e) {
    return absl::ResourceExhaustedError(
        absl::StrCat("model: cannot build on '", options.device, "': ", TorchError(e)));
  }
}

absl::StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::Build(const ModelWeights& w,
                                                              const Options& options,
                                                              std::unique_ptr<Impl> impl) {
  const ModelConfig& c = w.config;
  g_dtype = options.float64 ? at::kDouble : at::kFloat;
  impl->config = c;
  impl->options = options;
  // The CPU loop kernels keep a head in a fixed-size local array.
  impl->cpu_kernels = impl->device.is_cpu() && !options.generic_ops && c.head_size() <= 256;
  const at::Device& dev = impl->device;
  const int64_t d = c.dim, kv = c.kv_dim(), h = c.hidden_dim;
  impl->embedding = FromHost(w.token_embedding, {c.vocab_size, d}, dev);
  impl->classifier = FromHost(w.Classifier(), {c.vocab_size, d}, dev).t().contiguous();
  impl->rms_final = FromHost(w.rms_final, {d}, dev);
  const int64_t slots = int64_t{options.num_blocks} * options.block_size;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    Impl::Layer layer;
    layer.rms_att = Slice(w.rms_att, l, {d}, dev);
    layer.rms_ffn = Slice(w.rms_ffn, l, {d}, dev);
    layer.wqkv_t = at::cat({Slice(w.wq, l, {d, d}, dev), Slice(w.wk, l, {kv, d}, dev),
                            Slice(w.wv, l, {kv, d}, dev)})
                       .t()
                       .contiguous();
    layer.wo_t = Slice(w.wo, l, {d, d}, dev).t().contiguous();
    layer.w13_t =
        at::cat({Slice(w.w1, l, {h, d}, dev), Slice(w.w3, l, {h, d}, dev)}).t().contiguous();
    layer.w2_t = Slice(w.w2, l, {d, h}, dev).t().contiguous();
    auto opts = at::TensorOptions().dtype(g_dtype).device(dev);
    layer.k_cache =
        impl->cpu_kernels
            ? at::zeros({options.num_blocks, c.n_kv_heads, c.head_size(), options.block_size}, opts)
            : at::zeros({slots, c.n_kv_heads, c.head_size()}, opts);
    layer.v_cache = at::zeros({slots, c.n_kv_heads, c.head_size()}, opts);
    impl->layers.push_back(std::move(layer));
  }
  auto [cos, sin] =
      options.float64 ? RopeTables<double>(c, at::kDouble) : RopeTables<float>(c, at::kFloat);
  impl->cos = cos.to(dev);
  impl->sin = sin.to(dev);
  return std::unique_ptr<LlamaModel>(new LlamaModel(std::move(impl)));
}

absl::StatusOr<std::vector<float>> LlamaModel::Forward(std::span<const SequenceChunk> batch) {
  // The input is validated before any tensor work; what libtorch throws after that (out
  // of device memory, a CUDA error) becomes a status for the engine to fail the batch with.
  try {
    return ForwardImpl(batch);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("forward: ", TorchError(e)));
  }
}

absl::StatusOr<std::vector<float>> LlamaModel::ForwardImpl(std::span<const SequenceChunk> batch) {
  Impl& m = *impl_;
  const ModelConfig& c = m.config;
  const int bs = m.options.block_size;
  if (batch.empty()) return std::vector<float>();
  std::vector<int64_t> tokens, positions, slots, last_rows;
  std::vector<internal::QueryToken> queries;
  // Sequences with the same number of new tokens share one attention computation.
  // Decodes are also split by context length in buckets of kDecodeBucket tokens, so that
  // a short sequence is not padded to the longest one's context.
  constexpr int64_t kDecodeBucket = 128;
  std::map<std::pair<size_t, int64_t>, std::vector<size_t>> groups;
  for (size_t i = 0; i < batch.size(); ++i) {
    const SequenceChunk& s = batch[i];
    const int64_t end = int64_t{s.start_pos} + static_cast<int64_t>(s.tokens.size());
    if (s.tokens.empty() || s.start_pos < 0 || end > c.max_seq_len) {
      return absl::InvalidArgumentError(absl::StrCat("forward: sequence ", i, " covers positions [",
                                                     s.start_pos, ", ", end, ") outside [0, ",
                                                     c.max_seq_len, "]"));
    }
    if (static_cast<int64_t>(s.block_table.size()) * bs < end) {
      return absl::InvalidArgumentError(
          absl::StrCat("forward: sequence ", i, " has too short a block table"));
    }
    for (int b : s.block_table) {
      if (b < 0 || b >= m.options.num_blocks) {
        return absl::InvalidArgumentError(absl::StrCat("forward: block id ", b, " out of range"));
      }
    }
    for (size_t k = 0; k < s.tokens.size(); ++k) {
      if (s.tokens[k] < 0 || s.tokens[k] >= c.vocab_size) {
        return absl::InvalidArgumentError(
            absl::StrCat("forward: token id ", s.tokens[k], " out of range"));
      }
      const int64_t pos = s.start_pos + static_cast<int64_t>(k);
      tokens.push_back(s.tokens[k]);
      positions.push_back(pos);
      slots.push_back(int64_t{s.block_table[pos / bs]} * bs + pos % bs);
      queries.push_back({pos, s.block_table.data()});
    }
    last_rows.push_back(static_cast<int64_t>(tokens.size()) - 1);
    groups[{s.tokens.size(), s.tokens.size() == 1 ? end / kDecodeBucket : 0}].push_back(i);
  }
  const at::Device& dev = m.device;
  const int64_t T = static_cast<int64_t>(tokens.size());
  const int64_t H = c.n_heads, KVH = c.n_kv_heads, G = H / KVH, hs = c.head_size();
  const int64_t half = hs / 2;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hs));

  struct Group {
    int64_t B, Q, K;
    at::Tensor q_rows, gather, mask;
    bool all_rows;  // covers every row in order
  };
  std::vector<Group> plan;
  std::vector<int64_t> row_start(batch.size());
  for (size_t i = 0, r = 0; i < batch.size(); ++i) {
    row_start[i] = static_cast<int64_t>(r);
    r += batch[i].tokens.size();
  }
  const bool cpu = m.cpu_kernels;
  for (const auto& [key, members] : groups) {
    if (cpu) break;  // PagedAttentionCpu needs no plan
    const size_t q = key.first;
    Group g;
    g.B = static_cast<int64_t>(members.size());
    g.Q = static_cast<int64_t>(q);
    g.K = 0;
    for (size_t i : members) g.K = std::max<int64_t>(g.K, batch[i].start_pos + q);
    std::vector<int64_t> rows, gather(g.B * g.K, 0);
    std::vector<float> mask(g.B * g.Q * g.K, -std::numeric_limits<float>::infinity());
    for (int64_t b = 0; b < g.B; ++b) {
      const SequenceChunk& s = batch[members[b]];
      const int64_t ctx = s.start_pos + g.Q;
      for (int64_t j = 0; j < ctx; ++j) {
        gather[b * g.K + j] = int64_t{s.block_table[j / bs]} * bs + j % bs;
      }
      for (int64_t qi = 0; qi < g.Q; ++qi) {
        rows.push_back(row_start[members[b]] + qi);
        for (int64_t j = 0; j <= s.start_pos + qi; ++j) mask[(b * g.Q + qi) * g.K + j] = 0.0f;
      }
    }
    g.all_rows = static_cast<int64_t>(rows.size()) == T;
    g.q_rows = Index(rows, dev);
    g.gather = Index(gather, dev);
    g.mask = at::from_blob(mask.data(), {g.B, 1, 1, g.Q, g.K}, at::kFloat)
                 .to(dev, m.layers[0].k_cache.scalar_type(), false, true);
    plan.push_back(std::move(g));
  }

  c10::NoGradGuard no_grad;  // at::NoGradGuard is gone from ATen.h in libtorch 2.x
  at::Tensor x = m.embedding.index_select(0, Index(tokens, dev));  // [T, dim]
  at::Tensor slot_t, cos, sin;
  if (!cpu) {
    slot_t = Index(slots, dev);
    at::Tensor pos_t = Index(positions, dev);
    cos = m.cos.index_select(0, pos_t).unsqueeze(1);  // [T, 1, hs/2]
    sin = m.sin.index_select(0, pos_t).unsqueeze(1);
  }
  auto rms_norm = [&](const at::Tensor& v, const at::Tensor& w) {
    return cpu ? internal::RmsNormCpu(v, w, c.norm_eps) : m.RmsNorm(v, w);
  };
  for (Impl::Layer& layer : m.layers) {
    at::Tensor qkv = at::mm(rms_norm(x, layer.rms_att), layer.wqkv_t);
    at::Tensor q;
    if (cpu) {
      q = internal::RopeAndCacheCpu(qkv, m.cos, m.sin, queries, slots, layer.k_cache, layer.v_cache,
                                    H);
    } else {
      std::vector<at::Tensor> parts = qkv.split_with_sizes({c.dim, c.kv_dim(), c.kv_dim()}, 1);
      q = Impl::Rope(parts[0].reshape({T, H, hs}), cos, sin);
      at::Tensor k = Impl::Rope(parts[1].reshape({T, KVH, hs}), cos, sin);
      layer.k_cache.index_copy_(0, slot_t, k);
      layer.v_cache.index_copy_(0, slot_t, parts[2].reshape({T, KVH, hs}));
    }
    at::Tensor attn;
    if (cpu) {
      attn = internal::PagedAttentionCpu(q, layer.k_cache, layer.v_cache, queries, bs);
    }
    for (const Group& g : plan) {
      at::Tensor kk = layer.k_cache.index_select(0, g.gather).view({g.B, g.K, KVH, hs});
      at::Tensor vv = layer.v_cache.index_select(0, g.gather).view({g.B, g.K, KVH, hs});
      at::Tensor qq = (g.all_rows ? q : q.index_select(0, g.q_rows))
                          .view({g.B, g.Q, KVH, G, hs})
                          .permute({0, 2, 3, 1, 4})
                          .reshape({g.B, KVH, G * g.Q, hs});
      at::Tensor scores = at::matmul(qq, kk.permute({0, 2, 3, 1})).mul_(scale);
      scores = scores.view({g.B, KVH, G, g.Q, g.K}).add_(g.mask).softmax(-1);
      at::Tensor out = at::matmul(scores.view({g.B, KVH, G * g.Q, g.K}), vv.permute({0, 2, 1, 3}))
                           .view({g.B, KVH, G, g.Q, hs})
                           .permute({0, 3, 1, 2, 4})
                           .reshape({g.B * g.Q, c.dim});
      if (g.all_rows) {
        attn = out;
      } else {
        if (!attn.defined()) attn = at::empty({T, c.dim}, x.options());
        attn.index_copy_(0, g.q_rows, out);
      }
    }
    x = at::addmm(x, attn, layer.wo_t);
    at::Tensor gu = at::mm(rms_norm(x, layer.rms_ffn), layer.w13_t);
    if (cpu) {
      x = at::addmm(x, internal::SwiGluCpu(gu), layer.w2_t);
    } else {
      std::vector<at::Tensor> gate_up = gu.chunk(2, 1);
      x = at::addmm(x, at::silu(gate_up[0]) * gate_up[1], layer.w2_t);
    }
  }
  at::Tensor last = x.index_select(0, Index(last_rows, dev));
  at::Tensor logits =
      at::mm(rms_norm(last, m.rms_final), m.classifier).to(at::kCPU, at::kFloat).contiguous();
  std::vector<float> out(logits.numel());
  std::memcpy(out.data(), logits.data_ptr<float>(), out.size() * sizeof(float));
  (void)half;
  return out;
}

}  // namespace raio::llm
