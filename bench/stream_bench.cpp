// Streaming memory check: peak RSS of a whole-model forward that materializes one decoder block at
// a time from a memory-mapped checkpoint. Two steps, so the writer's memory is not measured:
//   stream_bench --write DIR [--layers 16] [--hidden 2048] [--inter 8192] [--vocab 32000]
//   /usr/bin/time -v stream_bench --run DIR [--seq 512]
// The run prints the fp32 size of one block, of the embeddings + lm_head, the activations, and the
// process peak RSS; the last line is a JSON object.
#include <cstdio>
#include <cstring>
#include <string>

#include "core/context.h"
#include "model/loader.h"
#include "model/synthetic.h"
#include "model/transformer.h"

using namespace ar;

namespace {
std::string sarg(int argc, char** argv, const char* name, const char* def) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return argv[i + 1];
  return def;
}
int64_t iarg(int argc, char** argv, const char* name, int64_t def) {
  std::string s = sarg(argc, argv, name, "");
  return s.empty() ? def : std::stoll(s);
}
}  // namespace

int main(int argc, char** argv) {
  std::string wdir = sarg(argc, argv, "--write", ""), rdir = sarg(argc, argv, "--run", "");
  if (!wdir.empty()) {
    nlohmann::json c = tiny_llama_config(iarg(argc, argv, "--layers", 16));
    c["hidden_size"] = iarg(argc, argv, "--hidden", 2048);
    c["intermediate_size"] = iarg(argc, argv, "--inter", 8192);
    c["num_attention_heads"] = iarg(argc, argv, "--heads", 32);
    c["num_key_value_heads"] = iarg(argc, argv, "--kv_heads", 8);
    c["vocab_size"] = iarg(argc, argv, "--vocab", 32000);
    c["max_position_embeddings"] = 4096;
    write_synthetic_model(wdir, c, 1, DType::BF16, 2);
    std::printf("wrote %s\n", wdir.c_str());
    return 0;
  }
  if (rdir.empty()) {
    std::fprintf(stderr, "usage: stream_bench --write DIR [--layers L --hidden C --inter I --heads H --kv_heads K --vocab V] | --run DIR [--seq N]\n");
    return 2;
  }
  const int64_t T = iarg(argc, argv, "--seq", 512);
  Context ctx;
  auto m = HfModel::open(rdir);
  const auto& c = m->config();
  const double block_mb = double(m->load_block(0, ctx).bytes()) / 1048576.0;
  const double embed_mb = double(c.vocab_size * c.hidden_size * 4 * (c.tie_word_embeddings ? 1 : 2)) / 1048576.0;
  Transformer t(*m, ctx, false);
  std::vector<int32_t> ids(static_cast<size_t>(T));
  for (int64_t i = 0; i < T; ++i) ids[size_t(i)] = int32_t((i * 7919) % c.vocab_size);
  double rss_before = peak_rss_mb();
  Tensor logits = t.forward_logits(ids.data(), nullptr, 1, T);
  const double act_mb = double(ctx.allocator().peak()) / 1048576.0;
  std::printf("layers %lld: one block %.0f MiB fp32, embeddings+lm_head %.0f MiB, allocator peak %.0f MiB, "
              "peak RSS %.0f MiB (before forward %.0f MiB)\n",
              (long long)c.num_layers, block_mb, embed_mb, act_mb, peak_rss_mb(), rss_before);
  std::printf("{\"bench\":\"stream_forward\",\"layers\":%lld,\"block_mb\":%.1f,\"embed_lm_head_mb\":%.1f,"
              "\"allocator_peak_mb\":%.1f,\"peak_rss_mb\":%.1f}\n",
              (long long)c.num_layers, block_mb, embed_mb, act_mb, peak_rss_mb());
  return 0;
}
