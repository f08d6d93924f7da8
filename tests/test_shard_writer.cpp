// ShardWriter: both ways of closing a shard (the header inserted in front of the data file where the
// filesystem can, or header + data copied into a new file) give the same bytes; every tensor reads
// back through our safetensors reader; shards split at the size limit and get an index.
#include <fcntl.h>
#include <unistd.h>

#include <filesystem>

#include "core/context.h"
#include "export/shard_writer.h"
#include "io/mapped_file.h"
#include "io/safetensors.h"
#include "test_util.h"

using namespace ar;
namespace fs = std::filesystem;

namespace {
std::string slurp(const std::string& path) { return read_text_file(path); }  // any bytes

// Tensors of assorted dtypes and sizes (some not a multiple of 8 bytes), deterministic contents.
std::vector<std::pair<std::string, Tensor>> sample_tensors(Context& ctx) {
  std::vector<std::pair<std::string, Tensor>> v;
  for (int i = 0; i < 7; ++i) {
    const DType dt = i % 3 == 0 ? DType::F32 : i % 3 == 1 ? DType::BF16 : DType::I32;
    Tensor t = Tensor::empty({int64_t(3 + 5 * i), int64_t(1 + 3 * i)}, dt, ctx);
    auto* p = static_cast<uint8_t*>(t.raw());
    for (size_t b = 0; b < t.nbytes(); ++b) p[b] = uint8_t(b * 31 + size_t(i) * 7);
    v.emplace_back("model.layers." + std::to_string(i) + ".w", std::move(t));
  }
  return v;
}

void write_all(const std::string& dir, uint64_t max_bytes, bool in_place, Context& ctx) {
  fs::create_directories(dir);
  ShardWriter w(dir, max_bytes);
  w.set_header_in_place(in_place);
  for (auto& [name, t] : sample_tensors(ctx)) w.add(name, t);
  w.finish();
}

// Whether `dir`'s filesystem inserts blocks at the front of a file (FALLOC_FL_INSERT_RANGE).
bool fs_inserts_blocks(const std::string& dir) {
  const std::string p = dir + "/probe";
  const int fd = ::open(p.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) return false;
  const std::string data(8192, 'x');
  const bool ok = ::write(fd, data.data(), data.size()) == ssize_t(data.size()) &&
                  fallocate(fd, FALLOC_FL_INSERT_RANGE, 0, 4096) == 0;
  ::close(fd);
  fs::remove(p);
  return ok;
}
}  // namespace

TEST(ShardWriter, InPlaceAndCopiedShardsAreTheSameBytes) {
  Context ctx({}, 1);
  const std::string root = test::temp_path("shard_writer");
  for (uint64_t max_bytes : {uint64_t(1) << 30, uint64_t(600)}) {  // one shard; several
    const std::string a = root + "/inplace" + std::to_string(max_bytes), b = root + "/copy" + std::to_string(max_bytes);
    write_all(a, max_bytes, true, ctx);
    write_all(b, max_bytes, false, ctx);
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(b)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    ASSERT_EQ(names.size() > 1, max_bytes < 1000) << names.size() << " files";
    for (const auto& n : names) {
      ASSERT_TRUE(fs::exists(a + "/" + n)) << n;
      EXPECT_EQ(slurp(a + "/" + n), slurp(b + "/" + n)) << n;
    }
    size_t found = 0;
    for (const auto& n : names) {
      if (n.find(".safetensors") == std::string::npos || n.find(".json") != std::string::npos) continue;
      const std::string bytes = slurp(a + "/" + n);
      uint64_t hl = 0;
      for (int i = 0; i < 8; ++i) hl |= uint64_t(uint8_t(bytes[size_t(i)])) << (8 * i);
      EXPECT_EQ((8 + hl) % 4096, 0u) << n << ": the data starts on a 4 KiB boundary";
      auto f = SafetensorsFile::open(a + "/" + n);
      for (auto& [name, t] : sample_tensors(ctx)) {
        const StTensorInfo* info = f->find(name);
        if (!info) continue;
        ++found;
        EXPECT_EQ(std::string(reinterpret_cast<const char*>(f->bytes(*info)), t.nbytes()),
                  std::string(static_cast<const char*>(t.raw()), t.nbytes()))
            << name;
      }
    }
    EXPECT_EQ(found, sample_tensors(ctx).size());
  }
  fs::remove_all(root);
}

// Where the filesystem can insert blocks, a closed shard is its data file renamed (no copy is left
// beside it until the end of the run), and nothing but the outputs remains after finish().
TEST(ShardWriter, ClosesShardsWithoutACopyWhereTheFilesystemCan) {
  Context ctx({}, 1);
  const std::string dir = test::temp_path("shard_writer_inplace");
  fs::create_directories(dir);
  if (!fs_inserts_blocks(dir)) GTEST_SKIP() << "this filesystem cannot insert blocks (the copy path is tested above)";
  for (bool in_place : {true, false}) {
    ShardWriter w(dir, 600);
    w.set_header_in_place(in_place);
    auto ts = sample_tensors(ctx);
    for (auto& [name, t] : ts) {
      w.add(name, t);
      if (fs::exists(dir + "/.shard_0")) break;  // the first shard was closed
    }
    ASSERT_TRUE(fs::exists(dir + "/.shard_0"));
    EXPECT_EQ(fs::exists(dir + "/.shard_data.0"), !in_place) << "in place " << in_place;
    w.finish();
    for (const auto& e : fs::directory_iterator(dir))
      EXPECT_EQ(e.path().filename().string().rfind(".shard", 0), std::string::npos) << e.path();
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  fs::remove_all(dir);
}
