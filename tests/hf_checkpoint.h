// Helpers for the tests that read tiny transformers checkpoints (tests/data/<family>/<case>/model): the
// config as JSON, the logits of our inference path, the checkpoint rewritten with one tensor per expert
// Linear (the layout of the original DeepSeek / GLM releases) from transformers 5's fused experts, and the
// comparison against transformers' logits.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "golden_file.h"
#include "io/safetensors.h"
#include "model/loader.h"
#include "model/transformer.h"
#include "test_util.h"

namespace ar::test {

inline nlohmann::json read_config(const std::string& dir) {
  std::ifstream f(dir + "/config.json");
  return nlohmann::json::parse(f);
}

inline std::vector<float> logits_of(const std::string& dir, const std::vector<int32_t>& ids, int64_t B, int64_t T) {
  auto m = HfModel::open(dir);
  Context ctx(Device{}, 2);
  Transformer tf(*m, ctx, false);
  Tensor l = tf.forward_logits(ids.data(), nullptr, B, T);
  return {l.f32(), l.f32() + l.numel()};
}

// The checkpoint at `from` written to `to` (config.json copied): each stored tensor handed to `each`, which
// appends what the new model.safetensors holds in its place.
using TensorRewrite = std::function<void(Context&, const StTensorInfo&, const uint8_t*, std::vector<StEntry>&)>;
inline void rewrite_checkpoint(const std::string& from, const std::string& to, const TensorRewrite& each) {
  std::filesystem::create_directories(to);
  std::filesystem::copy_file(from + "/config.json", to + "/config.json", std::filesystem::copy_options::overwrite_existing);
  Context ctx;
  auto f = SafetensorsFile::open(from + "/model.safetensors");
  std::vector<StEntry> out;
  for (const auto& t : f->header().tensors) each(ctx, t, f->bytes(t), out);
  write_safetensors(to + "/model.safetensors", out);
}

// A stored tensor as it is, under `name`.
inline StEntry stored_copy(Context& ctx, const StTensorInfo& t, const uint8_t* src, const std::string& name) {
  StEntry e{name, Tensor::empty(t.shape, t.dtype, ctx)};
  std::memcpy(e.tensor.raw(), src, e.tensor.nbytes());
  return e;
}

// The checkpoint with its fused experts split into one tensor per expert Linear (DeepSeek's own layout).
inline void write_per_expert(const std::string& from, const std::string& to) {
  rewrite_checkpoint(from, to, [](Context& ctx, const StTensorInfo& t, const uint8_t* src, std::vector<StEntry>& out) {
    const size_t el = dtype_size(t.dtype);
    const bool gate_up = t.name.ends_with("mlp.experts.gate_up_proj"), down = t.name.ends_with("mlp.experts.down_proj");
    if (!gate_up && !down) return out.push_back(stored_copy(ctx, t, src, t.name));
    const std::string base = t.name.substr(0, t.name.size() - (gate_up ? 11 : 9));  // "...mlp.experts."
    const int64_t E = t.shape[0], R = t.shape[1], K = t.shape[2], rows = gate_up ? R / 2 : R;
    for (int64_t e = 0; e < E; ++e)
      for (int part = 0; part < (gate_up ? 2 : 1); ++part) {
        const char* proj = gate_up ? (part == 0 ? "gate_proj" : "up_proj") : "down_proj";
        StEntry x{base + std::to_string(e) + "." + proj + ".weight", Tensor::empty({rows, K}, t.dtype, ctx)};
        std::memcpy(x.tensor.raw(), src + size_t((e * R + part * rows) * K) * el, x.tensor.nbytes());
        out.push_back(std::move(x));
      }
  });
}

// Appends a copy of layer `from`'s tensors under `dst` ("mtp.layers.0.": an MTP layer as Qwen3-Next stores
// it) to dir/model.safetensors.
inline void append_layer_copy_as(const std::string& dir, int64_t from, const std::string& dst) {
  const std::string src = "model.layers." + std::to_string(from) + ".";
  std::vector<StEntry> all;
  Context ctx;
  auto f = SafetensorsFile::open(dir + "/model.safetensors");
  for (const auto& t : f->header().tensors) {
    StEntry e{t.name, Tensor::empty(t.shape, t.dtype, ctx)};
    std::memcpy(e.tensor.raw(), f->bytes(t), e.tensor.nbytes());
    all.push_back(e);
    if (t.name.rfind(src, 0) == 0) all.push_back({dst + t.name.substr(src.size()), e.tensor});
  }
  f.reset();
  write_safetensors(dir + "/model.safetensors", all);
}

// Appends a copy of layer `from`'s tensors as layer `to` to dir/model.safetensors: an MTP layer stored
// past num_hidden_layers, as DeepSeek and GLM store theirs.
inline void append_layer_copy(const std::string& dir, int64_t from, int64_t to) {
  append_layer_copy_as(dir, from, "model.layers." + std::to_string(to) + ".");
}

// Every tensor of `in` not named in `skip`, copied (a checkpoint rewritten with some tensors replaced).
inline void append_stored_except(const SafetensorsFile& in, const std::set<std::string>& skip,
                                 std::vector<StEntry>& out, Context& ctx) {
  for (const auto& t : in.header().tensors)
    if (!skip.count(t.name)) {
      Tensor copy = Tensor::empty(t.shape, t.dtype, ctx);
      std::memcpy(copy.raw(), in.bytes(t), t.end - t.begin);
      out.push_back({t.name, copy});
    }
}

// A golden's token ids (dir/expected.safetensors: ids [B, T]).
struct GoldenIds {
  std::vector<int32_t> ids;
  int64_t B = 0, T = 0;
};
inline GoldenIds golden_ids(const std::string& dir) {
  auto golden = SafetensorsFile::open(dir + "/expected.safetensors");
  const StTensorInfo* ti = golden->find("ids");
  if (!ti) fail(ErrorKind::InvalidInput, dir + "/expected.safetensors: no ids");
  GoldenIds g{std::vector<int32_t>(size_t(ti->shape[0] * ti->shape[1])), ti->shape[0], ti->shape[1]};
  std::memcpy(g.ids.data(), golden->bytes(*ti), g.ids.size() * 4);
  return g;
}

// Our logits of `model` against transformers' (dir/expected.safetensors): within `rel` (5e-6) of its
// largest logit. Returns ours.
inline std::vector<float> expect_matches_golden(const std::string& dir, const std::string& model,
                                                const std::string& tag, double rel = 5e-6) {
  const GoldenIds g = golden_ids(dir);
  const ModelConfig cfg = load_model_config(model + "/config.json");
  const auto expect = read_f32(*SafetensorsFile::open(dir + "/expected.safetensors"), "logits",
                               size_t(g.B * g.T * cfg.vocab_size));
  const auto ours = logits_of(model, g.ids, g.B, g.T);
  double worst = 0, scale = 0;
  for (size_t i = 0; i < expect.size(); ++i) {
    worst = std::max(worst, std::abs(double(ours[i]) - double(expect[i])));
    scale = std::max(scale, std::abs(double(expect[i])));
  }
  EXPECT_LT(worst, rel * scale) << tag << " (largest logit " << scale << ")";
  return ours;
}

// Our logits of `dir/model` against transformers' in both expert layouts: the layouts give identical
// logits, and both match the golden.
inline void expect_logits_match_transformers(const std::string& dir, const std::string& tag) {
  const auto fused = expect_matches_golden(dir, dir + "/model", tag);
  TempDir per("per_expert_" + tag);
  write_per_expert(dir + "/model", per.path);
  const GoldenIds g = golden_ids(dir);
  EXPECT_TRUE(logits_of(per.path, g.ids, g.B, g.T) == fused) << tag << ": the two layouts give different logits";
}

// Against the exact model's goldens (transformers in float64, stored as float32, with fp32_worst [1]: the
// largest difference of transformers' own fp32 forward from them; tools/make_qwen3_next_goldens.py): an fp32
// forward's rounding grows with the sequence when a recurrent state carries every earlier token, so ours
// must stay within 5e-6 of the largest logit or twice transformers' own fp32 error, whichever is larger.
inline std::vector<float> expect_matches_exact_golden(const std::string& dir, const std::string& tag) {
  auto f = SafetensorsFile::open(dir + "/expected.safetensors");
  const GoldenIds g = golden_ids(dir);
  const int64_t V = load_model_config(dir + "/model/config.json").vocab_size;
  double largest = 0;
  for (float v : read_f32(*f, "logits", size_t(g.B * g.T * V))) largest = std::max(largest, std::abs(double(v)));
  const double fp32_worst = read_f32(*f, "fp32_worst", 1)[0];
  return expect_matches_golden(dir, dir + "/model", tag, std::max(5e-6, 2 * fp32_worst / largest));
}

// Incremental decoding of `dir`'s model (3 tokens, then one at a time) gives the whole-sequence forward's
// logits at every position (windows shorter than the 12 tokens: the cache holds more keys than a window).
inline void expect_decode_matches_forward(const std::string& dir) {
  auto m = HfModel::open(dir);
  Context ctx(Device{}, 2);
  Transformer tf(*m, ctx, true);
  const std::vector<int32_t> ids = {5, 17, 33, 8, 41, 12, 9, 60, 3, 22, 31, 47};
  Tensor full = tf.forward_logits(ids.data(), nullptr, 1, int64_t(ids.size()));
  const int64_t V = m->config().vocab_size;
  std::vector<float> last = tf.decode(ids.data(), 3);
  EXPECT_LT(rel_err(last.data(), full.f32() + 2 * V, size_t(V)), 1e-5);
  for (size_t i = 3; i < ids.size(); ++i) {
    last = tf.decode(ids.data() + i, 1);
    EXPECT_LT(rel_err(last.data(), full.f32() + int64_t(i) * V, size_t(V)), 1e-5) << dir << " position " << i;
  }
}

}  // namespace ar::test
