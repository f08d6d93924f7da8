#include "quant/cuda/block_pass_cuda.h"

#include <algorithm>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/bf16_ops.h"
#include "kernels/cuda/block_kernels.h"
#include "kernels/cuda/cuda_ops.h"
#include "quant/cuda/device_block.h"

namespace ar::quant {

void block_forward_cuda(cuda::DeviceContext& dev, Context& host, const BlockDims& dims, const BlockWeights& w,
                        const BlockAux<float>& aux, const Tensor& x, Tensor& y, int64_t n, int64_t bs, bool amp) {
  const auto no = [&](const std::string& what) {
    fail(ErrorKind::Unsupported, dev.name() + ": " + what + " does not run on the CUDA backend yet");
  };
  if (dims.is_moe()) no("a mixture-of-experts block");
  if (aux.key_mask) no("a key mask");
  if (n <= 0) return;
  const int64_t T = aux.T, per = T * dims.C;
  if (x.numel() < n * per || y.numel() < n * per)
    fail(ErrorKind::Internal, "block_forward_cuda: " + std::to_string(n) + " samples do not fit the tensors");
  bs = std::clamp<int64_t>(bs, 1, n);
  const DeviceBlock blk = upload_dense_block(dev, w);
  cuda::CudaOps ops(dev, amp);
  std::vector<cuda::DeviceArray<uint16_t>> w16;  // amp: each Linear's weight in bf16, rounded once
  if (amp) {
    using P = BlockPtrs<const float*>;
    const P hp = w.ptrs();
    for (auto f : {&P::wq, &P::wk, &P::wv, &P::wo, &P::wg, &P::wu, &P::wd}) {
      if (!(hp.*f)) continue;
      const cuda::DeviceArray<float>& W = blk.held.at(hp.*f);
      w16.push_back(dev.alloc<uint16_t>(W.n));
      cuda::to_bf16(dev, W.data(), w16.back().data(), W.n);
      ops.bind(W.data(), w16.back().data());
    }
  }
  const DeviceRope rope = upload_rope(dev, aux, bs, dims.D);
  auto xb = dev.alloc<float>(bs * per), yb = dev.alloc<float>(bs * per);
  const bool bx = x.dtype() == DType::BF16, by = y.dtype() == DType::BF16;
  std::vector<float> stage(static_cast<size_t>(bx || by ? bs * per : 0));
  BlockRunner<cuda::CudaOps> run(ops, dims);
  for (int64_t s0 = 0; s0 < n; s0 += bs) {
    const int64_t B = std::min(bs, n - s0), len = B * per;
    const float* src = bx ? stage.data() : x.f32() + s0 * per;
    if (bx) cpu::bf16_to_fp32(host, x.data<uint16_t>() + s0 * per, stage.data(), len);
    dev.upload(xb.data(), src, size_t(len) * sizeof(float));
    BlockRunner<cuda::CudaOps>::Cache c;
    const BlockAux<float> a{B, T, rope.pos.data(), rope.cos.data(), rope.sin.data(), nullptr};
    run.forward(blk.ptrs, a, xb.data(), yb.data(), c);
    float* dst = by ? stage.data() : y.f32() + s0 * per;
    dev.download(dst, yb.data(), size_t(len) * sizeof(float));
    if (by) cpu::fp32_to_bf16(host, stage.data(), y.data<uint16_t>() + s0 * per, len);
  }
}

}  // namespace ar::quant
