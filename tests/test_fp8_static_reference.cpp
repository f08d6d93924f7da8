// FP8_STATIC (W8A8) checkpoints evaluated as transformers evaluates them: the logits of the inference
// forward (model/transformer.h) against those of compressed-tensors' own forward in an fp32 model
// (tests/data/fp8_static_logits, made by tools/make_fp8_static_logits_goldens.py): weights read as the
// fp32 products e4m3(w) * weight_scale, each quantized Linear's input e4m3(clamp(x / s, -448, 448)) * s
// at its stored input scale, lm_head's included. Two checkpoints of tests/data/fp8_static's source
// model: ours (F32 scales, lm_head quantized) and AutoRound's (BF16 scales, lm_head dense).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>

#include <nlohmann/json.hpp>

#include "io/atomic_file.h"
#include "io/mapped_file.h"
#include "io/safetensors.h"
#include "model/loader.h"
#include "model/transformer.h"
#include "test_util.h"

using namespace ar;

namespace {

const std::string kData = std::string(AR_SOURCE_DIR) + "/tests/data/";

// A whole model in `dir`: the source model's tensors with the quantized checkpoint's in place of its
// Linears', the source's config with the checkpoint's quantization_config.
void assemble(const std::string& quantized, const std::string& dir) {
  const std::string src = kData + "fp8_static/source/";
  auto cfg = nlohmann::json::parse(read_text_file(src + "config.json"));
  cfg["quantization_config"] = nlohmann::json::parse(read_text_file(quantized + "/config.json"))["quantization_config"];
  write_file_atomic(dir + "/config.json", cfg.dump(2));
  Context ctx(Device{}, 1);
  std::vector<StEntry> out;
  std::set<std::string> replaced;
  auto copy = [&](const SafetensorsFile& f, const StTensorInfo& t) {
    Tensor x = Tensor::empty(t.shape, t.dtype, ctx);
    std::copy(f.bytes(t), f.bytes(t) + x.nbytes(), static_cast<uint8_t*>(x.raw()));
    out.push_back({t.name, std::move(x)});
  };
  auto q = SafetensorsFile::open(quantized + "/model.safetensors");
  for (const StTensorInfo& t : q->header().tensors) {
    replaced.insert(t.name.substr(0, t.name.rfind('.')));
    copy(*q, t);
  }
  auto s = SafetensorsFile::open(src + "model.safetensors");
  for (const StTensorInfo& t : s->header().tensors)
    if (!replaced.count(t.name.substr(0, t.name.rfind('.')))) copy(*s, t);
  write_safetensors(dir + "/model.safetensors", out);
}

}  // namespace

// An FP8 reader that rounds e4m3(w) * weight_scale to bf16 lands 0.057 (ours) and 0.031 (AutoRound's)
// of max |logit| away; with the fp32 products only the GEMMs' summation order differs (measured 0 and
// 2.9e-7 of max |logit|).
TEST(Fp8StaticReference, EvalMatchesCompressedTensorsForward) {
  auto golden = SafetensorsFile::open(kData + "fp8_static_logits/logits.safetensors");
  Context ctx(Device{}, 2);
  const StTensorInfo* it = golden->find("ids");
  ASSERT_TRUE(it && it->dtype == DType::I32);
  std::vector<int32_t> ids(size_t(it->shape[0]));
  std::memcpy(ids.data(), golden->bytes(*it), ids.size() * 4);
  for (const auto& [name, quantized] : {std::pair<std::string, std::string>{"ours", kData + "fp8_static_logits/ours"},
                                        {"autoround", kData + "fp8_static/llm_compressor"}}) {
    SCOPED_TRACE(name);
    test::TempDir dir("fp8s_ref_" + name);
    assemble(quantized, dir.path);
    auto model = HfModel::open(dir.path);
    ASSERT_TRUE(model->config().quant.act_static);
    Transformer tf(*model, ctx, false);
    const Tensor z = tf.forward_logits(ids.data(), nullptr, 1, int64_t(ids.size()));
    const Tensor want = golden->load_f32(name, ctx);
    ASSERT_EQ(z.numel(), want.numel());
    float amax = 0, dmax = 0;
    for (int64_t i = 0; i < z.numel(); ++i) {
      amax = std::max(amax, std::fabs(want.f32()[i]));
      dmax = std::max(dmax, std::fabs(z.f32()[i] - want.f32()[i]));
    }
    EXPECT_LE(dmax, 2e-6f * amax) << "max |diff| " << dmax << " of max |logit| " << amax;
  }
}
