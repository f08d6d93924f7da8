// The multi-process resume state's shard streaming (pipeline/shard_stream.h) on an in-memory link
// between threads: shards larger than one 16 MiB piece, of unequal sizes (one empty), gathered into
// rank 0's stream in rank order, and scattered back from a stream that arrives in reader-sized chunks
// that do not line up with the pieces (as ResumeKeeper::read_act delivers them).
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "core/context.h"
#include "parallel/process_link.h"
#include "pipeline/shard_stream.h"
#include "test_util.h"

using namespace ar;

namespace {
// Point-to-point messages between P threads, FIFO per (src, dst), as Gloo's ordered slots.
struct Mailboxes {
  explicit Mailboxes(int p) : P(p), boxes(size_t(p * p)) {}
  int P;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::deque<std::string>> boxes;  // [src * P + dst]
};

class ThreadLink : public parallel::ProcessLink {
 public:
  ThreadLink(Mailboxes& m, int rank) : m_(m), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return m_.P; }
  void sum_tree(float*, int64_t) override { ADD_FAILURE() << "not used"; }
  double sum_tree(double v) override { return v; }
  void allgather(const void*, size_t, void*) override { ADD_FAILURE() << "not used"; }
  void broadcast(void*, size_t, int) override { ADD_FAILURE() << "not used"; }
  void send(const void* buf, size_t bytes, int dst) override {
    std::lock_guard<std::mutex> g(m_.mu);
    m_.boxes[size_t(rank_ * m_.P + dst)].emplace_back(static_cast<const char*>(buf), bytes);
    m_.cv.notify_all();
  }
  void recv(void* buf, size_t bytes, int src) override {
    std::unique_lock<std::mutex> g(m_.mu);
    auto& box = m_.boxes[size_t(src * m_.P + rank_)];
    m_.cv.wait(g, [&] { return !box.empty(); });
    ASSERT_EQ(box.front().size(), bytes) << "a message of another size than the receiver expects";
    std::memcpy(buf, box.front().data(), bytes);
    box.pop_front();
  }
  int64_t bytes_received() const override { return 0; }

 private:
  Mailboxes& m_;
  int rank_;
};

// Runs body(stream, rank) as every rank of `mail`, each on its own thread (rank 0 on this one).
void as_every_rank(Mailboxes& mail, const std::vector<size_t>& sizes,
                   const std::function<void(ShardStream&, int)>& body) {
  std::vector<std::thread> th;
  auto rank = [&](int r) {
    ThreadLink link(mail, r);
    ShardStream s(link, sizes);
    body(s, r);
  };
  for (int r = 1; r < mail.P; ++r) th.emplace_back(rank, r);
  rank(0);
  for (auto& t : th) t.join();
}

Tensor filled(int64_t bytes, int seed, Context& ctx) {
  Tensor t = Tensor::empty({bytes}, DType::U8, ctx);
  auto* p = static_cast<uint8_t*>(t.raw());
  for (int64_t i = 0; i < bytes; ++i) p[i] = uint8_t((i * 131 + seed * 17 + (i >> 20)) & 0xff);
  return t;
}
}  // namespace

TEST(ShardStream, GatherAndScatterShardsLargerThanAPiece) {
  Context ctx(Device{}, 1);
  const std::vector<size_t> sizes = {(40u << 20) + 123, 0, (17u << 20) + 5};  // 3 ranks: 2.5 pieces, empty, 1+ piece
  Mailboxes mail(3);
  std::vector<Tensor> mine;
  for (int r = 0; r < 3; ++r) mine.push_back(filled(int64_t(sizes[size_t(r)]), r + 1, ctx));
  std::string expect;
  for (const auto& t : mine) expect.append(static_cast<const char*>(t.raw()), t.nbytes());

  // Save: rank 0 gathers every shard into one stream in rank order.
  std::string got;
  as_every_rank(mail, sizes, [&](ShardStream& s, int r) {
    if (r > 0) return s.send(mine[size_t(r)]);
    const ActSource src = s.gather(mine[0]);
    EXPECT_EQ(src.bytes, expect.size());
    src.produce([&](const void* p, size_t n) { got.append(static_cast<const char*>(p), n); });
  });
  EXPECT_TRUE(got == expect) << "the gathered stream differs from the shards in rank order";

  // Restore: the stream arrives in 7 MB + 1 byte reads; every rank gets exactly its shard back.
  std::vector<Tensor> back;
  for (size_t s : sizes) back.push_back(Tensor::zeros({int64_t(s)}, DType::U8, ctx));
  as_every_rank(mail, sizes, [&](ShardStream& s, int r) {
    if (r > 0) return s.receive(back[size_t(r)]);
    const ActSink sink = s.scatter(back[0]);
    const size_t chunk = 7000001;
    for (size_t off = 0; off < expect.size(); off += chunk) sink(expect.data() + off, std::min(chunk, expect.size() - off));
  });
  for (int r = 0; r < 3; ++r)
    EXPECT_EQ(std::memcmp(back[size_t(r)].raw(), mine[size_t(r)].raw(), sizes[size_t(r)]), 0) << "rank " << r;
  for (const auto& box : mail.boxes) EXPECT_TRUE(box.empty()) << "a message was left unread";
}
