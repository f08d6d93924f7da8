// safetensors: round trip, every malformed-header case with its message, and a bounded seeded
// mutation fuzz of the parser (only ar::Error may escape). Atomic outputs leave nothing on failure.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <fstream>
#include <random>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/mapped_file.h"
#include "io/gptq_pack.h"
#include "io/safetensors.h"
#include "io/sibling_name.h"
#include "io/text_source.h"
#include "test_util.h"

using namespace ar;
namespace fs = std::filesystem;

namespace {
std::string tmpdir(const std::string& name) {
  std::string d = ar::test::temp_path("io_" + name);
  fs::create_directories(d);
  return d;
}

std::string image(const std::string& header, size_t data_bytes) {
  std::string s(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) s[size_t(i)] = char(n >> (8 * i));
  return s + header + std::string(data_bytes, '\x01');
}

std::string parse_error(const std::string& img) {
  try {
    parse_safetensors(reinterpret_cast<const uint8_t*>(img.data()), img.size(), "x.safetensors");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(Safetensors, RoundTripAllDtypes) {
  Context ctx(Device{}, 1);
  std::string d = tmpdir("rt");
  Tensor a = Tensor::empty({2, 3}, DType::F32, ctx);
  for (int i = 0; i < 6; ++i) a.f32()[i] = float(i) - 2.5f;
  std::vector<StEntry> es = {{"a", a}, {"b", a.to(DType::BF16, ctx)}, {"c", a.to(DType::F16, ctx)}};
  write_safetensors(d + "/m.safetensors", es, {{"format", "pt"}});
  auto f = SafetensorsFile::open(d + "/m.safetensors");
  EXPECT_EQ(f->header().metadata.at("format"), "pt");
  EXPECT_EQ(f->header().data_start % 8, 0u);
  for (const char* n : {"a", "b", "c"}) {
    Tensor t = f->load_f32(n, ctx);
    ASSERT_EQ(t.shape(), (Shape{2, 3}));
    for (int i = 0; i < 6; ++i) EXPECT_EQ(t.f32()[i], a.f32()[i]) << n;
  }
  fs::remove_all(d);
}

TEST(Safetensors, RejectsMalformedHeaders) {
  const std::string ok = R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}})";
  EXPECT_EQ(parse_error(image(ok, 16)), "");
  EXPECT_NE(parse_error("abc").find("truncated"), std::string::npos);
  EXPECT_NE(parse_error(image(ok, 10)).find("truncated: tensor 'w'"), std::string::npos);
  std::string trunc_header = image(ok, 16).substr(0, 20);
  EXPECT_NE(parse_error(trunc_header).find("truncated: header length"), std::string::npos);
  EXPECT_NE(parse_error(image(R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,16]}})", 16)).find("needs 24"),
            std::string::npos);
  EXPECT_NE(parse_error(image(R"({"w":{"dtype":"Q9","shape":[2],"data_offsets":[0,2]}})", 2)).find("unsupported dtype Q9"),
            std::string::npos);
  EXPECT_NE(parse_error(image(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 8)).find("begin > end"),
            std::string::npos);
  EXPECT_NE(parse_error(image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                              R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12)).find("overlap"),
            std::string::npos);
  EXPECT_NE(parse_error(image(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4)).find("non-negative"),
            std::string::npos);
  EXPECT_NE(parse_error(image("[1,2]", 0)).find("not a JSON object"), std::string::npos);
  EXPECT_NE(parse_error(image("{", 0)).find("not valid JSON"), std::string::npos);
  std::string huge(8, '\xff');
  EXPECT_NE(parse_error(huge).find("exceeds"), std::string::npos);
}

TEST(Safetensors, UnsupportedWeightDtypeIsNamed) {
  Context ctx(Device{}, 1);
  std::string d = tmpdir("dt");
  Tensor t = Tensor::zeros({4}, DType::I32, ctx);
  write_safetensors(d + "/m.safetensors", {{"model.norm.weight", t}});
  auto f = SafetensorsFile::open(d + "/m.safetensors");
  try {
    f->load_f32("model.norm.weight", ctx);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'model.norm.weight' has dtype I32"), std::string::npos) << e.what();
  }
  fs::remove_all(d);
}

// Seeded random mutations of a valid image: bytes flipped, header length changed, truncations,
// JSON fragments spliced. The parser must either accept or throw ar::Error — never crash.
TEST(Safetensors, FuzzParserWithSeededMutations) {
  const std::string base = image(R"({"__metadata__":{"format":"pt"},"a":{"dtype":"BF16","shape":[3,4],)"
                                 R"("data_offsets":[0,24]},"b":{"dtype":"F32","shape":[2],"data_offsets":[24,32]}})",
                                 32);
  const char* splices[] = {"-1", "1e308", "\"", "{}", "[]", "null", "18446744073709551615", "[0,99999999999]", "\\u0000"};
  std::mt19937_64 rng(12345);
  int accepted = 0;
  for (int it = 0; it < 30000; ++it) {
    std::string m = base;
    int kind = int(rng() % 4);
    if (kind == 0) {
      for (int k = 0; k < 1 + int(rng() % 4); ++k) m[rng() % m.size()] = char(rng());
    } else if (kind == 1) {
      m.resize(rng() % m.size());
    } else if (kind == 2) {
      size_t at = 8 + rng() % (m.size() - 8);
      m.insert(at, splices[rng() % (sizeof splices / sizeof *splices)]);
    } else {
      m[rng() % 8] = char(rng());
    }
    try {
      parse_safetensors(reinterpret_cast<const uint8_t*>(m.data()), m.size(), "fuzz");
      ++accepted;
    } catch (const Error&) {
    }
  }
  EXPECT_GT(accepted, 0);  // some mutations (e.g. in the data section) stay valid
}

namespace {
using test::error_of;
std::vector<std::string> all_docs(const std::string& path, const std::string& field = "text", size_t chunk = 1 << 20) {
  auto s = TextSource::open(path, field, chunk);
  std::vector<std::string> docs;
  std::string d;
  while (s->next(&d)) docs.push_back(d);
  return docs;
}
}  // namespace

namespace {
OutputSpec spec_for(const std::string& path, bool overwrite) {
  OutputSpec s;
  s.path = path;
  s.overwrite = overwrite;
  return s;
}
}  // namespace

TEST(AtomicDir, FailureLeavesNothingAndExistingIsRefused) {
  std::string d = tmpdir("ad");
  std::string out = d + "/out";
  try {
    AtomicDir a(spec_for(out, false));
    write_file_atomic(a.file("x.txt"), "hello");
    throw std::runtime_error("simulated failure before commit");
  } catch (const std::runtime_error&) {
  }
  EXPECT_FALSE(fs::exists(out));
  EXPECT_TRUE(fs::is_empty(d));
  {
    AtomicDir a(spec_for(out, false));
    write_file_atomic(a.file("x.txt"), "hello");
    a.commit();
  }
  EXPECT_EQ(read_text_file(out + "/x.txt"), "hello");
  EXPECT_TRUE(is_our_output(out));
  EXPECT_THROW(AtomicDir(spec_for(out, false)), Error);
  {
    AtomicDir a(spec_for(out, true));
    write_file_atomic(a.file("y.txt"), "new");
    a.commit();
  }
  EXPECT_FALSE(fs::exists(out + "/x.txt"));
  EXPECT_EQ(std::distance(fs::directory_iterator(d), fs::directory_iterator()), 1);  // no temporaries left
  fs::remove_all(d);
}

TEST(AtomicDir, OverwriteReplacesOnlyEmptyOrOurOwnDirectories) {
  std::string d = tmpdir("adown");
  fs::create_directories(d + "/user");
  { std::ofstream(d + "/user/notes.txt") << "precious"; }
  auto err = [&](const OutputSpec& s) { return error_of([&] { AtomicDir a(s); }); };
  EXPECT_NE(err(spec_for(d + "/user", true)).find("not an output of autoround"), std::string::npos);
  EXPECT_NE(err(spec_for(d + "/user/notes.txt", true)).find("exists and is not a directory"), std::string::npos);
  // A forged-looking marker that is a symlink, or not ours, does not count.
  fs::create_symlink(d + "/user/notes.txt", d + "/user/" + std::string(kOutputMarker));
  EXPECT_NE(err(spec_for(d + "/user", true)).find("not an output of autoround"), std::string::npos);
  EXPECT_EQ(read_text_file(d + "/user/notes.txt"), "precious");
  // Every spelling of the same place is judged the same: trailing slash, ./, .., a symlink to it.
  fs::create_symlink(d + "/user", d + "/link");
  for (const std::string& p : {d + "/user/", d + "/./user", d + "/user/../user", d + "/link"})
    EXPECT_NE(err(spec_for(p, true)).find(d + "/user: is not empty"), std::string::npos) << p;
  // Inputs, their ancestors, the root and the current directory are never outputs.
  OutputSpec s = spec_for(d + "/user", true);
  s.inputs = {d + "/user/notes.txt"};
  EXPECT_NE(err(s).find("contains an input of this run"), std::string::npos);
  s = spec_for(d + "/link", true);
  s.inputs = {d + "/user"};
  EXPECT_NE(err(s).find("is an input of this run"), std::string::npos);
  EXPECT_NE(err(spec_for("/", true)).find("root directory"), std::string::npos);
  EXPECT_NE(err(spec_for(".", true)).find("current directory"), std::string::npos);
  EXPECT_NE(err(spec_for("..", true)).find("contains the current directory"), std::string::npos);
  const char* home = std::getenv("HOME");
  const std::string saved = home ? home : "";
  setenv("HOME", (d + "/user").c_str(), 1);
  EXPECT_NE(err(spec_for(d, true)).find("is or contains the home directory"), std::string::npos);
  EXPECT_NE(err(spec_for(d + "/link", true)).find("is or contains the home directory"), std::string::npos);
  if (home) setenv("HOME", saved.c_str(), 1); else unsetenv("HOME");
  // An empty directory is replaced.
  fs::create_directories(d + "/empty");
  {
    AtomicDir a(spec_for(d + "/empty", true));
    write_file_atomic(a.file("z.txt"), "z");
    a.commit();
  }
  EXPECT_EQ(read_text_file(d + "/empty/z.txt"), "z");
  EXPECT_EQ(read_text_file(d + "/user/notes.txt"), "precious");
  fs::remove_all(d);
}

TEST(AtomicDir, StaleTemporaryOfAKilledRunIsRemovedAndALiveOneStopsTheRun) {
  std::string d = tmpdir("adstale");
  fs::create_directories(d);
  const std::string stale = d + "/out.autoround-tmp.abc123";
  fs::create_directories(stale);
  { std::ofstream(stale + "/" + kOutputMarker) << output_marker_json("quantize"); }
  { std::ofstream(stale + "/.shard_data.0") << "half written"; }
  const std::string foreign = d + "/out.autoround-tmp.user";  // not ours: left alone
  fs::create_directories(foreign);
  {
    AtomicDir a(spec_for(d + "/out", false));
    EXPECT_NE(a.note().find("removed " + stale + ", left by an interrupted run"), std::string::npos) << a.note();
    EXPECT_FALSE(fs::exists(stale));
    // While this one is open, a second run on the same output sees a live temporary and stops.
    EXPECT_NE(error_of([&] { AtomicDir b(spec_for(d + "/out", false)); }).find("another autoround run is writing"),
              std::string::npos);
  }
  EXPECT_TRUE(fs::exists(foreign));
  fs::remove_all(d);
}

TEST(AtomicDir, ResumableTemporaryIsKeptOnlyOnceItHoldsState) {
  std::string d = tmpdir("adres");
  fs::create_directories(d);
  OutputSpec s = spec_for(d + "/out", false);
  s.resumable = true;
  { AtomicDir a(s); }
  EXPECT_FALSE(fs::exists(d + "/out.partial"));  // nothing worth keeping yet
  {
    AtomicDir a(s);
    a.keep();
  }
  EXPECT_TRUE(is_our_output(d + "/out.partial"));
  {
    AtomicDir a(s);
    EXPECT_TRUE(a.resumed());
    AtomicDir b(spec_for(d + "/out", false));  // a plain run reports the kept state, leaves it alone
    EXPECT_NE(b.note().find("out.partial holds the resume state"), std::string::npos) << b.note();
  }
  fs::remove_all(d + "/out.partial");
  fs::create_directories(d + "/out.partial");  // not ours: refused, untouched
  { std::ofstream(d + "/out.partial/data") << "x"; }
  EXPECT_NE(error_of([&] { AtomicDir a(s); }).find("is not autoround resume state"), std::string::npos);
  EXPECT_TRUE(fs::exists(d + "/out.partial/data"));
  fs::remove_all(d);
}

TEST(OutputFile, ExistingFilesAreReplacedOnlyWhenOursAndAsked) {
  std::string d = tmpdir("ofile");
  fs::create_directories(d);
  { std::ofstream(d + "/r.json") << "{}"; }
  auto ours = [](const std::string&) { return true; };
  auto theirs = [](const std::string&) { return false; };
  EXPECT_NE(error_of([&] { check_output_file(d + "/r.json", "--report", false, {}, ours); }).find("file exists"),
            std::string::npos);
  EXPECT_NE(error_of([&] { check_output_file(d + "/r.json", "--report", true, {}, theirs); }).find("not written by autoround"),
            std::string::npos);
  EXPECT_EQ(check_output_file(d + "/./r.json", "--report", true, {}, ours), canonical_path(d) + "/r.json");
  EXPECT_NE(error_of([&] { check_output_file(d, "--report", true, {}, ours); }).find("not a regular file"), std::string::npos);
  fs::remove_all(d);
}

TEST(AtomicFile, UnwritableLocationIsAnIoError) {
  EXPECT_THROW(write_file_atomic("/nonexistent_dir_ar/x", "a"), Error);
}


TEST(TextSource, PlainJsonlAndDirectory) {
  std::string d = tmpdir("ts");
  { std::ofstream(d + "/a.txt") << "first line\nsecond line\n"; }
  { std::ofstream(d + "/b.jsonl") << "{\"text\": \"doc one\", \"id\": 1}\n\n{\"text\": \"caf\u00e9\", \"body\": \"x\"}\n"; }
  EXPECT_EQ(all_docs(d + "/a.txt"), (std::vector<std::string>{"first line\nsecond line\n"}));
  EXPECT_EQ(all_docs(d + "/b.jsonl"), (std::vector<std::string>{"doc one", "caf\xC3\xA9"}));
  EXPECT_EQ(all_docs(d), (std::vector<std::string>{"first line\nsecond line\n", "doc one", "caf\xC3\xA9"}));
  EXPECT_NE(error_of([&] { all_docs(d + "/b.jsonl", "body"); }).find("b.jsonl:1: no string field 'body'"), std::string::npos);
  EXPECT_EQ(read_all_text(d + "/b.jsonl"), "doc one\n\ncaf\xC3\xA9");
  fs::remove_all(d);
}

TEST(TextSource, StreamsInChunksWithoutSplittingCodePoints) {
  std::string d = tmpdir("chunk");
  std::string text;
  for (int i = 0; i < 500; ++i) text += "line " + std::to_string(i) + " \xE2\x96\x81\xF0\x9F\xA6\x99\n";
  text += std::string(300, 'z') + "\xC3\xA9" + std::string(300, 'y');  // a long line with no newline
  { std::ofstream(d + "/big.txt", std::ios::binary) << text; }
  auto docs = all_docs(d + "/big.txt", "text", 64);
  EXPECT_GT(docs.size(), 50u);
  std::string joined;
  for (const auto& doc : docs) {
    EXPECT_LE(doc.size(), 64u);
    joined += doc;
  }
  EXPECT_EQ(joined, text);
  fs::remove_all(d);
}

TEST(TextSource, BadInputsNameFileAndOffset) {
  std::string d = tmpdir("bad");
  { std::ofstream(d + "/u.txt", std::ios::binary) << "good text\n" << std::string(100, 'a') << "\xC3\x28 tail"; }
  EXPECT_NE(error_of([&] { all_docs(d + "/u.txt"); }).find("u.txt: invalid UTF-8 at byte 110"), std::string::npos);
  { std::ofstream(d + "/u.jsonl", std::ios::binary) << "{\"text\":\"ok\"}\n{\"text\":\"\xED\xA0\x80\"}\n"; }
  EXPECT_NE(error_of([&] { all_docs(d + "/u.jsonl"); }).find("u.jsonl: invalid UTF-8 at byte 23 (line 2)"), std::string::npos);
  { std::ofstream(d + "/e.txt"); }
  EXPECT_NE(error_of([&] { all_docs(d + "/e.txt"); }).find("e.txt: file is empty"), std::string::npos);
  { std::ofstream(d + "/j.jsonl") << "[1,2]\n"; }
  EXPECT_NE(error_of([&] { all_docs(d + "/j.jsonl"); }).find("j.jsonl:1: not a JSON object"), std::string::npos);
  EXPECT_NE(error_of([&] { all_docs(d + "/missing.txt"); }).find("no such file"), std::string::npos);
  fs::create_directories(d + "/empty");
  EXPECT_NE(error_of([&] { all_docs(d + "/empty"); }).find("holds no"), std::string::npos);
  fs::remove_all(d);
}

TEST(GptqPack, RoundTripsEveryWidthAndMatchesTheClassic3BitLayout) {
  for (int bits : {2, 3, 4, 8}) {
    const int64_t out = 40, in = 64, groups = 2;
    std::vector<uint8_t> codes(size_t(out * in));
    std::vector<int32_t> zeros(size_t(groups * out));
    for (size_t i = 0; i < codes.size(); ++i) codes[i] = uint8_t((i * 2654435761u >> 7) % (1u << bits));
    for (size_t i = 0; i < zeros.size(); ++i) zeros[i] = int32_t((i * 40503u >> 3) % (1u << bits));
    auto qw = gptq_pack_qweight(codes, out, in, bits);
    auto qz = gptq_pack_qzeros(zeros, groups, out, bits);
    ASSERT_EQ(int64_t(qw.size()), in * bits / 32 * out);
    for (int64_t o = 0; o < out; ++o)
      for (int64_t i = 0; i < in; ++i) ASSERT_EQ(gptq_code(qw.data(), out, bits, i, o), codes[size_t(o * in + i)]);
    for (int64_t g = 0; g < groups; ++g)
      for (int64_t o = 0; o < out; ++o) ASSERT_EQ(gptq_zero(qz.data(), out, bits, g, o), uint32_t(zeros[size_t(g * out + o)]));
    if (bits != 3) continue;
    // GPTQ's 3-bit word layout, written out: values 0-9 in word 0 bits 0..29, value 10 split 2+1,
    // values 11-20 at bits 1..30 of word 1, value 21 split 1+2, values 22-31 at bits 2..31 of word 2.
    const uint32_t* w = reinterpret_cast<const uint32_t*>(qw.data());
    auto v = [&](int t) { return uint32_t(codes[size_t(t)]); };  // column 0, rows 0..31
    uint32_t w0 = 0, w1 = 0, w2 = 0;
    for (int j = 0; j < 10; ++j) w0 |= v(j) << (3 * j);
    w0 |= v(10) << 30;
    w1 |= (v(10) >> 2) & 1;
    for (int j = 0; j < 10; ++j) w1 |= v(11 + j) << (3 * j + 1);
    w1 |= v(21) << 31;
    w2 |= (v(21) >> 1) & 3;
    for (int j = 0; j < 10; ++j) w2 |= v(22 + j) << (3 * j + 2);
    EXPECT_EQ(w[0 * out], w0);
    EXPECT_EQ(w[1 * out], w1);
    EXPECT_EQ(w[2 * out], w2);
  }
}

TEST(AwqPack, NibbleOrderAndRoundTrip) {
  std::vector<uint8_t> v(2 * 16);
  for (size_t i = 0; i < v.size(); ++i) v[i] = uint8_t(i % 16);
  auto p = awq_pack_rows(v, 2, 16);
  ASSERT_EQ(p.size(), 4u);
  // Row 0, columns 0..7 hold values 0..7: column j sits in nibble {0,4,1,5,2,6,3,7}[j].
  EXPECT_EQ(uint32_t(p[0]), 0x75316420u);
  for (int64_t r = 0; r < 2; ++r)
    for (int64_t o = 0; o < 16; ++o) EXPECT_EQ(awq_get(p.data(), 16, r, o), v[size_t(r * 16 + o)]);
  EXPECT_THROW(awq_pack_rows(v, 4, 8 + 1), Error);
}

// ---- Text sources cannot hang: a byte cap per source, standard input only when asked for
namespace {
// Runs f with standard input replaced by `path` (restored after, also when f throws).
std::string with_stdin(const std::string& path, const std::function<void()>& f) {
  const int saved = ::dup(STDIN_FILENO), fd = ::open(path.c_str(), O_RDONLY);
  ::dup2(fd, STDIN_FILENO);
  ::close(fd);
  std::string err;
  try {
    f();
  } catch (const Error& e) {
    err = e.what();
  }
  ::dup2(saved, STDIN_FILENO);
  ::close(saved);
  return err;
}
}  // namespace

TEST(TextSource, EndlessStandardInputStopsAtTheByteCap) {
  TextSourceOptions opt;
  opt.option = "--text";
  opt.allow_stdin = true;
  opt.max_bytes = 8 << 20;
  const std::string err = with_stdin("/dev/zero", [&] { read_all_text("-", "text", opt); });
  EXPECT_NE(err.find("--text -: more than 8388608 bytes, the limit for one text source"), std::string::npos) << err;
  EXPECT_EQ(kMaxTextSourceBytes, uint64_t(1) << 32);
}

TEST(TextSource, StandardInputOnlyWhenAllowed) {
  std::string d = tmpdir("stdin"), f = d + "/in.txt";
  std::ofstream(f) << "piped text\n";
  TextSourceOptions opt;
  opt.allow_stdin = true;
  std::string got;
  EXPECT_EQ(with_stdin(f, [&] { got = read_all_text("-", "text", opt); }), "");
  EXPECT_EQ(got, "piped text\n");
  EXPECT_NE(with_stdin(f, [&] { TextSource::open("-"); }).find("standard input is not accepted here"), std::string::npos);
  fs::remove_all(d);
}

TEST(TextSource, ByteCapCountsTheWholeSource) {
  std::string d = tmpdir("cap");
  std::ofstream(d + "/a.txt") << std::string(3000, 'a');
  std::ofstream(d + "/b.txt") << std::string(3000, 'b');
  TextSourceOptions opt;
  opt.max_bytes = 6000;  // exactly the source: accepted
  EXPECT_EQ(read_all_text(d, "text", opt).size(), 6002u);  // the two files and the blank line between
  opt.max_bytes = 5999;
  opt.chunk_bytes = 64;
  EXPECT_THROW(read_all_text(d, "text", opt), Error);
  std::ofstream(d + "/c.jsonl") << "{\"text\": \"" << std::string(5000, 'c') << "\"}\n";
  opt.max_bytes = 4096;
  try {
    read_all_text(d + "/c.jsonl", "text", opt);
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("c.jsonl: more than 4096 bytes"), std::string::npos) << e.what();
  }
  fs::remove_all(d);
}

TEST(TextSource, DevicesAndFifosAreRefusedWithoutOpeningThem) {
  std::string d = tmpdir("fifo");
  ASSERT_EQ(::mkfifo((d + "/p.txt").c_str(), 0644), 0);
  TextSourceOptions opt;
  opt.option = "--dataset";
  auto msg = [&](const std::string& p) {
    try {
      TextSource::open(p, "text", opt);  // on the code before the check this returned, and next() blocked
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(msg(d + "/p.txt"), "--dataset " + d + "/p.txt: a FIFO (named pipe), not a regular file");
  EXPECT_EQ(msg("/dev/zero"), "--dataset /dev/zero: a character device, not a regular file");
  try {
    read_text_file(d + "/p.txt");
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("a FIFO (named pipe), not a regular file"), std::string::npos);
  }
  fs::remove_all(d);
}

// ---- Temporaries of a 255-byte output name (NAME_MAX) still fit, and are found again
TEST(SiblingName, ShortNamesKeepTheSuffixAndLongOnesAreShortenedStably) {
  EXPECT_EQ(sibling_name("/a/out", ".partial"), "/a/out.partial");
  const std::string n255(255, 'o'), other = std::string(254, 'o') + "p";
  const std::string p = sibling_name("/a/" + n255, ".partial");
  EXPECT_EQ(fs::path(p).filename().string().size(), 255u);
  EXPECT_EQ(p.rfind("/a/ooo", 0), 0u);                          // still starts like the output
  EXPECT_EQ(p.substr(p.size() - 8), ".partial");
  EXPECT_EQ(p, sibling_name("/a/" + n255, ".partial"));          // the same every time (resume)
  EXPECT_NE(p, sibling_name("/a/" + other, ".partial"));         // and different per output
  const std::string u = std::string(250, 'x') + "\xc3\xa9\xc3\xa9";  // 254 bytes, cut inside no character
  const std::string q = fs::path(sibling_name(u, ".autoround-tmp.XXXXXX")).filename().string();
  EXPECT_LE(q.size(), 255u);
  EXPECT_EQ(q.substr(q.size() - 6), "XXXXXX");
}

TEST(AtomicDir, AnOutputNameOf255BytesWorksPlainAndResumable) {
  std::string d = tmpdir("ad255");
  const std::string out = d + "/" + std::string(255, 'n');
  {
    AtomicDir a(spec_for(out, false));  // mkdtemp failed with ENAMETOOLONG before
    std::ofstream(a.file("x")) << "1";
    a.commit();
  }
  EXPECT_TRUE(fs::exists(out + "/x"));
  write_file_atomic(out + "/" + std::string(255, 'f'), "file");  // AtomicFile's .tmp.XXXXXX too
  EXPECT_TRUE(fs::exists(out + "/" + std::string(255, 'f')));
  OutputSpec s = spec_for(out, true);
  s.resumable = true;
  {
    AtomicDir a(s);
    a.keep();
  }
  {
    AtomicDir a(s);
    EXPECT_TRUE(a.resumed());  // found its shortened .partial again
    a.commit();
  }
  EXPECT_EQ(std::distance(fs::directory_iterator(d), fs::directory_iterator{}), 1);  // no temporary left
  fs::remove_all(d);
}
