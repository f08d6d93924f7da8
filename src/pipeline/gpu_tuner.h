// The GPU side of `quantize --device cuda:N` (docs/cuda.md), in a build with the CUDA backend: each
// block's SignRound (quant/cuda/signround_cuda.h) and its FP and quantized-input passes where they gather
// no statistics (quant/cuda/block_pass_cuda.h). The rest of the run (calibration, the passes that gather
// statistics, the searches, packing) stays on the CPU. What the GPU cannot do yet is refused before any
// work, naming it.
#pragma once
#include <functional>
#include <memory>
#include <string>

#include "model/config.h"
#include "pipeline/quantize.h"
#include "quant/signround.h"

namespace ar {

// Whether this binary has the CUDA backend.
bool cuda_built();

class GpuTuner {
 public:
  // Opens cuda:index: "cuda:0: no CUDA device visible (...)", "cuda:3: no such device (2 visible)", or
  // a build without the backend, each refused with one line.
  static std::unique_ptr<GpuTuner> open(int index);
  virtual ~GpuTuner() = default;
  virtual std::string describe() const = 0;  // "cuda:0 (NVIDIA H200, 139.8 GiB)"
  virtual quant::BlockTuneResult tune(Context& host, const BlockDims& dims, BlockWeights& w,
                                      const quant::QuantFormat& fmt, const BlockAux<float>& aux, const Tensor& x_in,
                                      const Tensor& y_fp, const std::vector<uint8_t>& loss_mask,
                                      const quant::SignRoundOptions& opt,
                                      const quant::LayerFormats* layers) = 0;
  // y[s] = block(x[s]) for samples [0, n), micro-batches of bs samples; amp: bf16 GEMM operands.
  virtual void forward_all(Context& host, const BlockDims& dims, const BlockWeights& w, const BlockAux<float>& aux,
                           const Tensor& x, Tensor& y, int64_t n, int64_t bs, bool amp) = 0;
};

// Refuses (Unsupported, naming the option) what `quantize --device cuda:N` cannot run yet: float
// schemes with one scale per tensor and FP8_STATIC, GGUF outputs, mixture-of-experts models, data-parallel lanes and multi-process
// jobs.
void check_gpu_run(const QuantizeOptions& o, const ModelConfig& cfg, int processes);

}  // namespace ar
