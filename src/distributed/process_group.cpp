#include "distributed/process_group.h"

#include <algorithm>
#include <cstring>
#include <gloo/allgather.h>
#include <gloo/alltoall.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/context.h>
#include <gloo/transport/unbound_buffer.h>
#include <vector>

#include "core/error.h"

namespace ar::dist {

namespace {
constexpr int64_t kPiece = int64_t(1) << 24;  // floats per collective: bounds the scratch to 2 x 64 MiB
constexpr uint64_t kP2pSlot = 0x61725f7032700000ull;  // point-to-point messages: ordered per pair

// sum(a, b) = sum(a, mid) + sum(mid, b): the same association as the in-process exchange and the
// tuning's leaf tree, so a power-of-two process count reproduces the serial run's bits.
template <class T>
void tree_rows(const T* in, int64_t len, int a, int b, T* out, std::vector<std::vector<T>>& scratch, size_t depth) {
  if (b - a == 1) {
    std::memcpy(out, in + int64_t(a) * len, size_t(len) * sizeof(T));
    return;
  }
  if (b - a == 2) {  // a pair of leaves: the same sum without the copies
    const T* x = in + int64_t(a) * len;
    const T* y = x + len;
    for (int64_t i = 0; i < len; ++i) out[i] = x[i] + y[i];
    return;
  }
  const int mid = (a + b) / 2;
  tree_rows(in, len, a, mid, out, scratch, depth + 1);
  if (scratch.size() <= depth) scratch.resize(depth + 1);
  scratch[depth].resize(size_t(len));
  T* right = scratch[depth].data();
  tree_rows(in, len, mid, b, right, scratch, depth + 1);
  for (int64_t i = 0; i < len; ++i) out[i] += right[i];
}
}  // namespace

template <class T>
void tree_sum_rows(const T* in, int64_t len, int rows, T* out) {
  std::vector<std::vector<T>> scratch;
  tree_rows(in, len, 0, rows, out, scratch, 0);
}
template void tree_sum_rows<float>(const float*, int64_t, int, float*);
template void tree_sum_rows<double>(const double*, int64_t, int, double*);

GlooProcessGroup::GlooProcessGroup(std::shared_ptr<gloo::Context> ctx,
                                   std::function<std::string(const std::string&, const std::string&)> explain)
    : ctx_(std::move(ctx)), explain_(std::move(explain)) {}

GlooProcessGroup::~GlooProcessGroup() = default;

int GlooProcessGroup::rank() const { return ctx_->rank; }
int GlooProcessGroup::size() const { return ctx_->size; }

template <class F>
void GlooProcessGroup::guarded(const char* op, F&& f) {
  try {
    f();
  } catch (const ::gloo::Exception& e) {
    fail(ErrorKind::Io, explain_(op, e.what()));
  }
}

// Where the piece divides evenly (every piece but a ragged last one) Gloo reads and writes `buf` itself;
// otherwise the piece is staged, zero-padded, in `pad_`.
void GlooProcessGroup::sum_piece(float* buf, int64_t n) {
  const int P = size();
  const int64_t chunk = (n + P - 1) / P;
  const bool even = chunk * P == n;
  float* io = buf;
  if (!even) {
    pad_.assign(static_cast<size_t>(chunk * P), 0.f);
    std::memcpy(pad_.data(), buf, size_t(n) * sizeof(float));
    io = pad_.data();
  }
  theirs_.resize(static_cast<size_t>(chunk * P));
  mine_.resize(static_cast<size_t>(chunk));
  guarded("gradient exchange (alltoall)", [&] {
    gloo::AlltoallOptions o(ctx_);
    o.setInput(io, size_t(chunk * P));
    o.setOutput(theirs_.data(), theirs_.size());
    gloo::alltoall(o);
  });
  tree_sum_rows(theirs_.data(), chunk, P, mine_.data());
  guarded("gradient exchange (allgather)", [&] {
    gloo::AllgatherOptions o(ctx_);
    o.setInput(mine_.data(), mine_.size());
    o.setOutput(io, size_t(chunk * P));
    gloo::allgather(o);
  });
  if (!even) std::memcpy(buf, pad_.data(), size_t(n) * sizeof(float));
  received_ += 2 * int64_t(P - 1) * chunk * int64_t(sizeof(float));
}

void GlooProcessGroup::sum_tree(float* buf, int64_t n) {
  if (size() == 1) return;
  for (int64_t o = 0; o < n; o += kPiece) sum_piece(buf + o, std::min(kPiece, n - o));
}

double GlooProcessGroup::sum_tree(double v) {
  if (size() == 1) return v;
  std::vector<double> all(static_cast<size_t>(size()));
  allgather(&v, sizeof v, all.data());
  double s = 0;
  tree_sum_rows(all.data(), 1, size(), &s);
  return s;
}

void GlooProcessGroup::allgather(const void* in, size_t bytes, void* out) {
  std::vector<char> src(static_cast<const char*>(in), static_cast<const char*>(in) + bytes);
  guarded("allgather", [&] {
    gloo::AllgatherOptions o(ctx_);
    o.setInput(src.data(), bytes);
    o.setOutput(static_cast<char*>(out), bytes * size_t(size()));
    gloo::allgather(o);
  });
  received_ += int64_t(bytes) * (size() - 1);
}

void GlooProcessGroup::broadcast(void* buf, size_t bytes, int root) {
  guarded("broadcast", [&] {
    gloo::BroadcastOptions o(ctx_);
    o.setOutput(static_cast<char*>(buf), bytes);
    o.setRoot(root);
    gloo::broadcast(o);
  });
  if (rank() != root) received_ += int64_t(bytes);
}

void GlooProcessGroup::send(const void* buf, size_t bytes, int dst) {
  guarded("send", [&] {
    auto ub = ctx_->createUnboundBuffer(const_cast<void*>(buf), bytes);
    ub->send(dst, kP2pSlot);
    ub->waitSend(ctx_->getTimeout());
  });
}

void GlooProcessGroup::recv(void* buf, size_t bytes, int src) {
  guarded("receive", [&] {
    auto ub = ctx_->createUnboundBuffer(buf, bytes);
    ub->recv(src, kP2pSlot);
    ub->waitRecv(ctx_->getTimeout());
  });
  received_ += int64_t(bytes);
}

}  // namespace ar::dist
