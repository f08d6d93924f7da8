#include "pipeline/shard_stream.h"

#include <algorithm>
#include <cstring>
#include <memory>

#include "core/error.h"

namespace ar {

namespace {
constexpr size_t kPiece = 16u << 20;  // both sides cut a shard into the same pieces
}

ShardStream::ShardStream(parallel::ProcessLink& link, std::vector<size_t> shard_bytes)
    : link_(link), bytes_(std::move(shard_bytes)) {
  AR_CHECK(int(bytes_.size()) == link.size(), "shard stream: one size per process");
}

ActSource ShardStream::gather(const Tensor& mine) {
  AR_CHECK(mine.nbytes() == bytes_[0], "shard stream: rank 0's shard size");
  size_t total = 0;
  for (size_t b : bytes_) total += b;
  return {total, [this, &mine](const ActSink& sink) {
            sink(mine.raw(), mine.nbytes());
            std::vector<char> piece;
            for (int q = 1; q < link_.size(); ++q)
              for (size_t off = 0; off < bytes_[size_t(q)]; off += kPiece) {
                piece.resize(std::min(kPiece, bytes_[size_t(q)] - off));
                link_.recv(piece.data(), piece.size(), q);
                sink(piece.data(), piece.size());
              }
          }};
}

void ShardStream::send(const Tensor& mine) {
  const int r = link_.rank();
  AR_CHECK(r > 0 && mine.nbytes() == bytes_[size_t(r)], "shard stream: this rank's shard size");
  const char* p = static_cast<const char*>(mine.raw());
  for (size_t off = 0; off < mine.nbytes(); off += kPiece) link_.send(p + off, std::min(kPiece, mine.nbytes() - off), 0);
}

// The stream arrives in reader-sized pieces; bytes are routed by their offset: rank 0's copied into
// `mine`, every other rank's staged into kPiece pieces and sent when a piece is full.
ActSink ShardStream::scatter(Tensor& mine) {
  AR_CHECK(mine.nbytes() == bytes_[0], "shard stream: rank 0's shard size");
  struct State {
    size_t q = 0, off = 0;  // current rank and offset inside its shard
    std::vector<char> piece;
  };
  auto st = std::make_shared<State>();
  return [this, &mine, st](const void* data, size_t n) {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      while (st->q < bytes_.size() && st->off == bytes_[st->q]) st->q++, st->off = 0;
      AR_CHECK(st->q < bytes_.size(), "shard stream: more bytes than the shards hold");
      const size_t room = bytes_[st->q] - st->off;
      size_t take = std::min(n, room);
      if (st->q == 0) {
        std::memcpy(static_cast<char*>(mine.raw()) + st->off, p, take);
      } else {
        const size_t piece_end = std::min(bytes_[st->q], (st->off / kPiece + 1) * kPiece);
        take = std::min(take, piece_end - st->off);
        st->piece.insert(st->piece.end(), p, p + take);
        if (st->off + take == piece_end) {
          link_.send(st->piece.data(), st->piece.size(), int(st->q));
          st->piece.clear();
        }
      }
      st->off += take;
      p += take;
      n -= take;
    }
  };
}

void ShardStream::receive(Tensor& mine) {
  const int r = link_.rank();
  AR_CHECK(r > 0 && mine.nbytes() == bytes_[size_t(r)], "shard stream: this rank's shard size");
  char* p = static_cast<char*>(mine.raw());
  for (size_t off = 0; off < mine.nbytes(); off += kPiece) link_.recv(p + off, std::min(kPiece, mine.nbytes() - off), 0);
}

}  // namespace ar
