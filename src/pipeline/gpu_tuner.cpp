#include "pipeline/gpu_tuner.h"

#include <cstdio>

#include "core/error.h"

#if defined(AR_HAVE_CUDA)
#include "quant/cuda/block_pass_cuda.h"
#include "quant/cuda/signround_cuda.h"
#endif

namespace ar {

void check_gpu_run(const QuantizeOptions& o, const ModelConfig& cfg, int processes) {
  const std::string dev = "--device cuda:" + std::to_string(o.cuda_device);
  const auto no = [&](const std::string& what) {
    fail(ErrorKind::Unsupported, dev + ": " + what + " is not tuned on the CUDA backend yet (docs/cuda.md)");
  };
  if (o.fmt.is_float() && o.fmt.group_size == 0) no("a float weight scheme with one scale per tensor");
  if (o.fmt.act_static()) no("FP8_STATIC");
  if (o.format.find("gguf") != std::string::npos) no("a GGUF output");
  if (cfg.is_moe()) no("a mixture-of-experts model");
  if (cfg.is_mla()) no("multi-head latent attention (" + cfg.architecture + ")");
  for (int64_t l = 0; l < cfg.num_layers; ++l)
    if (cfg.is_delta_layer(l)) no("Gated DeltaNet linear attention (" + cfg.architecture + ")");
  if (o.parallel.mode != parallel::ParallelSetting::Off || !o.devices.empty()) no("a data-parallel lane");
  if (processes > 1) no("a multi-process job");
}

#if defined(AR_HAVE_CUDA)

bool cuda_built() { return true; }

namespace {

class CudaTuner : public GpuTuner {
 public:
  explicit CudaTuner(int index) : dev_(index) {}
  std::string describe() const override {
    cudaDeviceProp p{};
    cuda::check(cudaGetDeviceProperties(&p, dev_.index()), dev_.index(), "device properties");
    char mem[32];
    std::snprintf(mem, sizeof mem, "%.1f GiB", double(p.totalGlobalMem) / double(1ull << 30));
    return dev_.name() + " (" + p.name + ", " + mem + ")";
  }
  quant::BlockTuneResult tune(Context& host, const BlockDims& dims, BlockWeights& w, const quant::QuantFormat& fmt,
                              const BlockAux<float>& aux, const Tensor& x_in, const Tensor& y_fp,
                              const std::vector<uint8_t>& loss_mask, const quant::SignRoundOptions& opt,
                              const quant::LayerFormats* layers) override {
    quant::BlockTuneResult r =
        quant::signround_tune_block_cuda(dev_, host, dims, w, fmt, aux, x_in, y_fp, loss_mask, opt, layers);
    dev_.allocator().trim();  // the next block's sizes may differ (the first and last blocks, a lm_head)
    return r;
  }
  void forward_all(Context& host, const BlockDims& dims, const BlockWeights& w, const BlockAux<float>& aux,
                   const Tensor& x, Tensor& y, int64_t n, int64_t bs, bool amp) override {
    quant::block_forward_cuda(dev_, host, dims, w, aux, x, y, n, bs, amp);
    dev_.allocator().trim();
  }

 private:
  cuda::DeviceContext dev_;
};

}  // namespace

std::unique_ptr<GpuTuner> GpuTuner::open(int index) { return std::make_unique<CudaTuner>(index); }

#else

bool cuda_built() { return false; }

std::unique_ptr<GpuTuner> GpuTuner::open(int index) {
  fail(ErrorKind::Unsupported, "--device cuda:" + std::to_string(index) +
                                   ": this build has the CPU backend only (build with nvcc present: docs/cuda.md)");
}

#endif

}  // namespace ar
