#include "cli/inference.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "cli/model_path.h"
#include "core/error.h"
#include "eval/perplexity.h"
#include "model/gguf_source.h"
#include "model/loader.h"
#include "model/tokenizer/tokenizer.h"

namespace ar::cli {

namespace {
constexpr const char* kScoring = "second half of each non-overlapping window scored, first token BOS (llama.cpp convention)";

nlohmann::ordered_json compare_json(const CompareResult& c, int64_t ctx) {
  nlohmann::ordered_json j;
  j["ppl"] = c.model.ppl;
  j["ppl_stderr"] = c.model.ppl_stderr;
  j["tokens"] = c.model.tokens_scored;
  j["ref_ppl"] = c.ref.ppl;
  j["ref_ppl_stderr"] = c.ref.ppl_stderr;
  j["delta_ppl"] = c.delta_ppl;
  j["delta_ppl_stderr"] = c.delta_ppl_stderr;
  j["kl_mean"] = c.kl_mean;
  j["kl_median"] = c.kl_median;
  j["kl_p99"] = c.kl_p99;
  j["kl_max"] = c.kl_max;
  j["top1_agreement"] = c.top1_agreement;
  j["ctx"] = ctx;
  j["scoring"] = kScoring;
  return j;
}

nlohmann::ordered_json ppl_json(const PplResult& r) {
  nlohmann::ordered_json j;
  j["ppl"] = r.ppl;
  j["ppl_stderr"] = r.ppl_stderr;
  j["nll_mean"] = r.nll_mean;
  j["tokens"] = r.tokens_scored;
  j["windows"] = r.windows;
  j["ctx"] = r.ctx;
  j["scoring"] = kScoring;
  return j;
}
}  // namespace

nlohmann::ordered_json evaluate_text(const EvalRequest& req, const std::function<std::string()>& read_text) {
  const std::string model_dir = resolve_model_dir(req.model);
  const std::string ref_dir = req.ref_model.empty() ? "" : resolve_model_dir(req.ref_model, "--ref-model");
  auto model = open_model(model_dir);
  auto tok = load_tokenizer(*model);
  auto ids = tok->encode(read_text());
  // The default window shrinks to the model's context, but not below the shortest window eval scores.
  const int64_t need = req.ctx > 0 ? req.ctx : kMinEvalWindow;
  const std::string what = req.ctx > 0 ? "eval --ctx " + std::to_string(req.ctx) : std::string("eval");
  require_context(*model, need, what);
  const int64_t ctx = req.ctx > 0 ? req.ctx : std::min<int64_t>(512, model->config().context_tokens());
  Context dev(Device{}, req.threads);
  Transformer tf(*model, dev, /*resident=*/false);
  if (ref_dir.empty()) return ppl_json(perplexity(tf, ids, ctx, tok->bos(), req.batch, req.progress));
  auto ref = open_model(ref_dir);
  require_context(*ref, ctx, what + " (reference model)");
  Transformer rt(*ref, dev, /*resident=*/false);
  return compare_json(compare_models(tf, rt, ids, ctx, tok->bos(), req.batch, req.progress), ctx);
}

std::string eval_summary(const nlohmann::ordered_json& j) {
  char b[1024];
  const std::string scoring = j["scoring"].get<std::string>();
  if (!j.contains("kl_mean")) {
    std::snprintf(b, sizeof b, "perplexity %.4f +/- %.4f over %lld tokens (%lld windows of %lld; %s)",
                  j["ppl"].get<double>(), j["ppl_stderr"].get<double>(), j["tokens"].get<long long>(),
                  j["windows"].get<long long>(), j["ctx"].get<long long>(), scoring.c_str());
    return b;
  }
  std::snprintf(b, sizeof b,
                "perplexity %.4f +/- %.4f (reference %.4f +/- %.4f), delta %.4f +/- %.4f over %lld tokens\n"
                "KL divergence: mean %.6f, median %.6f, p99 %.6f, max %.6f; top-1 agreement %.2f%%\n(%s)",
                j["ppl"].get<double>(), j["ppl_stderr"].get<double>(), j["ref_ppl"].get<double>(),
                j["ref_ppl_stderr"].get<double>(), j["delta_ppl"].get<double>(), j["delta_ppl_stderr"].get<double>(),
                j["tokens"].get<long long>(), j["kl_mean"].get<double>(), j["kl_median"].get<double>(),
                j["kl_p99"].get<double>(), j["kl_max"].get<double>(), 100 * j["top1_agreement"].get<double>(),
                scoring.c_str());
  return b;
}

LogitsResult text_logits(const std::string& model_arg, const std::string& text) {
  auto model = open_model(resolve_model_dir(model_arg));
  auto tok = load_tokenizer(*model);
  LogitsResult r;
  r.ids = tok->encode(text);
  require_context(*model, int64_t(r.ids.size()), "logits");
  Context ctx;
  Transformer tf(*model, ctx, false);
  Tensor logits = tf.forward_logits(r.ids.data(), nullptr, 1, int64_t(r.ids.size()));
  r.vocab = model->config().vocab_size;
  r.logits.resize(logits.nbytes() / sizeof(float));
  std::memcpy(r.logits.data(), logits.raw(), logits.nbytes());
  return r;
}

}  // namespace ar::cli
