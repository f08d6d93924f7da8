// What a MoE layer's checkpoint layout needs of the loader (model/moe_names.h): which layout a layer has,
// Mixtral's spelling, and a fused expert tensor read one expert at a time (each expert's gate, up and down
// rows are contiguous), so the block materializes in fp32 without a second copy of the stacked tensor;
// gpt-oss's transposed, interleaved slices are gathered into each Linear's [out, in] (stored_columns).
#include "core/error.h"
#include "model/loader.h"
#include "model/moe_names.h"

namespace ar {

bool HfModel::fused_experts(int64_t layer) const {
  const std::string gate_up = fused_experts_name(layer, ExpertProj::Gate);
  return has(gate_up) || (cfg_.quant.mxfp4_experts && has(gate_up + "_blocks"));
}

// A Mixtral checkpoint spells its experts' Linears w1/w3/w2 (the original checkpoints) unless its first
// MoE layer's expert 0 is stored as gate_proj (plain, GPTQ-packed or compressed-tensors-packed: a quantized
// Mixtral as AutoRound writes it).
void HfModel::detect_mixtral_spelling() {
  if (!cfg_.moe.mixtral_names) return;
  for (int64_t l = 0; l < cfg_.num_layers; ++l) {
    if (!cfg_.is_moe_layer(l)) continue;
    const std::string p = layer_prefix(l) + "block_sparse_moe.experts.0.gate_proj.";
    cfg_.moe.mixtral_w_names = !(has(p + "weight") || has(p + "qweight") || has(p + "weight_packed"));
    return;
  }
}

Tensor HfModel::load_slice(const std::string& name, int64_t offset, const Shape& shape, Context& ctx) const {
  std::string file;
  const StTensorInfo* t = source_ ? nullptr : info(name, &file);
  if (!t) fail(ErrorKind::InvalidInput, dir_ + ": tensor '" + name + "' is missing");
  const Stored& at = where_.at(name);
  return shards_[at.shard]->load_f32_range(at.name, offset, shape, ctx);
}

Tensor HfModel::stored_columns(const Tensor& slice, const BlockTensor& t, Context& ctx) {
  const BlockTensor::Columns& c = t.columns;
  const int64_t n = (c.cols - c.first + c.step - 1) / c.step;
  if (n * c.rows != shape_numel(t.shape))
    fail(ErrorKind::Internal, "stored_columns: " + t.name + " is not " + std::to_string(n) + " columns of " +
                                  std::to_string(c.rows) + " rows");
  Tensor out = Tensor::empty(t.shape, DType::F32, ctx);
  const float* src = slice.f32();
  float* dst = out.f32();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t r = 0; r < c.rows; ++r) dst[i * c.rows + r] = src[r * c.cols + c.first + i * c.step];
  return out;
}

}  // namespace ar
