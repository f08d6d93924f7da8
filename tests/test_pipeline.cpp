// End-to-end quantization: synthetic model -> auto_round export -> loader dequantizes exactly to the
// QDQ weights; runs are byte-identical for the same seed; bad options leave no output behind; on the
// real stories260K, SignRound beats RTN on KL divergence against the FP model.
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "eval/perplexity.h"
#include "io/mapped_file.h"
#include "io/safetensors.h"
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>
#include <csignal>
#include <cstdio>
#include "model/convert_llama2c.h"
#include "model/loader.h"
#include "model/synthetic.h"
#include "model/tokenizer/tokenizer.h"
#include "model/transformer.h"
#include "io/output_guard.h"
#include "pipeline/outputs.h"
#include "pipeline/quantize.h"
#include "pipeline/run_estimate.h"
#include "pipeline/run_summary.h"
#include "model/config.h"
#include "quant/qdq.h"
#include "fp_schemes.h"
#include "quantize_options.h"
#include "test_util.h"
#include "stories260k_model.h"
#include "kill_after_block.h"

using namespace ar;
namespace fs = std::filesystem;

namespace {
std::string tmpdir(const std::string& n) {
  std::string d = ar::test::temp_path("pipe_" + n);
  return d;
}
QuantizeOptions small_opts(const std::string& model, const std::string& out, int iters) {
  return test::small_quantize_options(model, out, iters);
}
}  // namespace

TEST(Pipeline, RtnExportDequantizesExactlyToQdqWeights) {
  std::string m = tmpdir("m"), q = tmpdir("q");
  write_synthetic_model(m, tiny_llama_config(2), 3);
  auto o = small_opts(m, q, 0);
  o.disable_opt_rtn = true;  // plain RTN: comparable with qdq_fwd below
  quantize_model(o);
  EXPECT_TRUE(file_exists(q + "/tokenizer.bin"));
  auto src = HfModel::open(m), dst = HfModel::open(q);
  EXPECT_TRUE(dst->config().quant.present);
  Context ctx(Device{}, 2);
  for (int64_t l = 0; l < 2; ++l) {
    BlockWeights a = src->load_block(l, ctx), b = dst->load_block(l, ctx);
    for (auto [wa, wb] : {std::pair{&a.wq, &b.wq}, std::pair{&a.wd, &b.wd}, std::pair{&a.wg, &b.wg}}) {
      auto sh = quant::make_qdq_shape(wa->dim(0), wa->dim(1), 4, 32, true);
      std::vector<float> lo(size_t(sh.out * sh.groups())), hi(lo.size()), ref(size_t(wa->numel()));
      quant::qdq_minmax(ctx, sh, wa->f32(), lo.data(), hi.data());
      quant::qdq_fwd(ctx, sh, wa->f32(), nullptr, nullptr, nullptr, lo.data(), hi.data(), ref.data(), nullptr, nullptr);
      for (int64_t i = 0; i < wa->numel(); ++i) ASSERT_EQ(wb->f32()[i], ref[size_t(i)]) << "layer " << l << " i " << i;
    }
    for (int64_t i = 0; i < a.ln1.numel(); ++i) ASSERT_EQ(a.ln1.f32()[i], b.ln1.f32()[i]);
  }
  fs::remove_all(m);
  fs::remove_all(q);
}

TEST(Pipeline, AllFormatsReadBackToTheSameWeights) {
  std::string m = tmpdir("fm");
  auto cfg = tiny_llama_config(1);
  cfg["intermediate_size"] = 96;  // down_proj in = 96: a multiple of 32
  write_synthetic_model(m, cfg, 8);
  for (auto [sym, bits] : {std::pair{true, 4}, std::pair{false, 4}, std::pair{true, 3}, std::pair{false, 2}}) {
    std::vector<std::unique_ptr<HfModel>> outs;
    std::vector<std::string> dirs;
    std::vector<const char*> formats = {"auto_round", "auto_gptq"};
    if (bits == 4) formats.push_back("auto_awq");
    for (const char* f : formats) {
      std::string q = tmpdir(std::string(f) + (sym ? "s" : "a"));
      auto o = small_opts(m, q, 3);
      o.fmt.sym = sym;
      o.fmt.bits = bits;
      o.format = f;
      quantize_model(o);
      dirs.push_back(q);
      outs.push_back(HfModel::open(q));
    }
    EXPECT_TRUE(outs[1]->has("model.layers.0.self_attn.q_proj.g_idx"));
    Context ctx(Device{}, 1);
    BlockWeights a = outs[0]->load_block(0, ctx);
    for (size_t k = 1; k < outs.size(); ++k) {
      BlockWeights b = outs[k]->load_block(0, ctx);
      for (auto [x, y] : {std::pair{&a.wq, &b.wq}, std::pair{&a.wu, &b.wu}, std::pair{&a.wd, &b.wd}})
        for (int64_t i = 0; i < x->numel(); ++i) ASSERT_EQ(x->f32()[i], y->f32()[i]) << "sym " << sym << " bits " << bits << " format " << formats[k];
    }
    if (bits == 4 && !sym) {
      EXPECT_EQ(outs[0]->config().quant.awq, true);  // auto_round asym 4-bit -> AWQ layout
    }
    for (auto& d : dirs) fs::remove_all(d);
  }
  fs::remove_all(m);
}

TEST(Pipeline, SeveralFormatsFromOneTuningEqualSingleRuns) {
  // --format auto_round,auto_gptq,fake: one subdirectory per format (AutoRound's names), each byte-identical
  // to the run with that format alone; every one is complete (config, tokenizer) and loads.
  std::string m = tmpdir("mfm"), multi = tmpdir("mfq");
  auto cfg = tiny_llama_config(2);
  cfg["intermediate_size"] = 80;  // down_proj in = 80: kept in 16 bit (not a multiple of 32)
  write_synthetic_model(m, cfg, 6);
  auto o = small_opts(m, multi, 3);
  o.format = "auto_round,auto_gptq,fake";
  QuantizeReport r = quantize_model(o);
  EXPECT_TRUE(file_exists(multi + "/" + kOutputMarker));
  for (const char* f : {"auto_round", "auto_gptq", "fake"}) {
    const std::string sub = multi + "/" + format_subdir(f), single = tmpdir(std::string("mfs_") + f);
    auto so = small_opts(m, single, 3);
    so.format = f;
    quantize_model(so);
    for (const char* file : {"model.safetensors", "config.json", "quantization_config.json", "tokenizer.bin"})
      EXPECT_EQ(read_text_file(sub + "/" + file), read_text_file(single + "/" + file)) << f << " " << file;
    EXPECT_NO_THROW(HfModel::open(sub)) << f;
    fs::remove_all(single);
  }
  EXPECT_EQ(format_subdir("auto_gptq"), "auto-gptq");
  const auto qc = nlohmann::json::parse(read_text_file(multi + "/auto-round/quantization_config.json"));
  EXPECT_EQ(qc["extra_config"]["model.layers.0.mlp.down_proj"]["data_type"], "fp");  // AutoRound's spelling
  EXPECT_EQ(qc["extra_config"]["model.layers.0.mlp.down_proj"]["bits"], 16);
  // auto_gptq lists the Linears quantized inside a block (transformers/optimum ignore `dynamic`), and
  // fake is a plain 16-bit model (no quantization_config in config.json), as AutoRound writes them.
  const auto gq = nlohmann::json::parse(read_text_file(multi + "/auto-gptq/quantization_config.json"));
  EXPECT_EQ(gq["modules_in_block_to_quantize"],
            nlohmann::json::parse(R"([["self_attn.k_proj", "self_attn.o_proj", "self_attn.q_proj", "self_attn.v_proj"]])"));
  EXPECT_FALSE(nlohmann::json::parse(read_text_file(multi + "/fake/config.json")).contains("quantization_config"));
  EXPECT_TRUE(nlohmann::json::parse(read_text_file(multi + "/auto-round/config.json")).contains("quantization_config"));
  o.format = "auto_round,auto_round";
  EXPECT_THROW(quantize_model(o), Error);
  o.format = "auto_round,gguf";
  EXPECT_THROW(quantize_model(o), Error);
  fs::remove_all(m);
  fs::remove_all(multi);
}

TEST(Pipeline, SameSeedGivesByteIdenticalOutput) {
  std::string m = tmpdir("dm"), a = tmpdir("da"), b = tmpdir("db");
  write_synthetic_model(m, tiny_llama_config(2), 4);
  quantize_model(small_opts(m, a, 5));
  quantize_model(small_opts(m, b, 5));
  EXPECT_EQ(read_text_file(a + "/model.safetensors"), read_text_file(b + "/model.safetensors"));
  EXPECT_EQ(read_text_file(a + "/config.json"), read_text_file(b + "/config.json"));
  fs::remove_all(m);
  fs::remove_all(a);
  fs::remove_all(b);
}

TEST(Pipeline, NonFiniteWeightIsNamed) {
  std::string m = tmpdir("nan"), q = tmpdir("nanq");
  write_synthetic_model(m, tiny_llama_config(2), 6);
  {  // poison one weight of block 1 in place
    std::string path = m + "/model.safetensors";
    auto f = SafetensorsFile::open(path);
    const StTensorInfo* t = f->find("model.layers.1.mlp.up_proj.weight");
    ASSERT_NE(t, nullptr);
    size_t off = f->header().data_start + t->begin + 40;
    f.reset();
    std::FILE* fp = std::fopen(path.c_str(), "r+b");
    std::fseek(fp, long(off), SEEK_SET);
    float nan = std::nanf("");
    std::fwrite(&nan, 4, 1, fp);
    std::fclose(fp);
  }
  try {
    quantize_model(small_opts(m, q, 0));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.layers.1.mlp.up_proj.weight: non-finite value"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(q));
  fs::remove_all(m);
}

// A full disk, simulated with RLIMIT_FSIZE in a child process (writes past the limit fail with
// EFBIG): the run fails with an I/O error and leaves no output directory and no temporary behind.
TEST(Pipeline, DiskFullAndUnwritableOutputLeaveNothing) {
  std::string m = tmpdir("full"), q = tmpdir("fullq");
  write_synthetic_model(m, tiny_llama_config(2), 7);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl {20000, 20000};  // bytes: smaller than one shard of this model
    setrlimit(RLIMIT_FSIZE, &rl);
    int code = 0;
    try {
      quantize_model(small_opts(m, q, 0));
      code = 2;  // must not succeed
    } catch (const Error& e) {
      code = (e.kind() == ErrorKind::Io && std::string(e.what()).find("write failed") != std::string::npos) ? 0 : 3;
    } catch (...) {
      code = 4;
    }
    _exit(code);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  ASSERT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 0);
  EXPECT_FALSE(fs::exists(q));
  for (const auto& e : fs::directory_iterator(fs::path(q).parent_path()))
    EXPECT_EQ(e.path().string().find(q + ".tmp"), std::string::npos) << "leftover " << e.path();
  auto o = small_opts(m, "/proc/version/out", 0);  // a path that cannot be created
  EXPECT_THROW(quantize_model(o), Error);
  fs::remove_all(m);
}

namespace {
using json = nlohmann::json;

// Every file under `dir` with its content (a snapshot to show that nothing changed).
std::map<std::string, std::string> snapshot(const std::string& dir) {
  std::map<std::string, std::string> m;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    m[e.path().string()] = e.is_regular_file() ? read_text_file(e.path().string()) : "<dir>";
  return m;
}

// Resume state is untrusted input: each tampered state is refused with one error naming the state
// file, and neither the .partial directory nor a file outside it changes.
void expect_tampered_states_refused(const QuantizeOptions& o, const std::string& partial) {
  const std::string state_path = partial + "/resume_state.json", victim = partial + "/../victim.txt";
  { std::ofstream(victim) << "not yours"; }
  const std::string good = read_text_file(state_path);
  const json st = json::parse(good);
  const std::string act = partial + "/" + st["x_fp"].get<std::string>();
  struct Case { const char* what; std::function<void()> tamper; const char* msg; };
  auto with = [&](const std::function<void(json&)>& f) {
    json j = st;
    f(j);
    std::ofstream(state_path, std::ios::trunc) << j.dump();
  };
  const std::vector<Case> cases = {
      {"next_block past the model", [&] { with([](json& j) { j["next_block"] = 99; }); }, "'next_block' 99 is outside 1..4"},
      {"next_block zero", [&] { with([](json& j) { j["next_block"] = 0; }); }, "is outside 1..4"},
      {"activation path outside", [&] { with([](json& j) { j["x_fp"] = "../victim.txt"; }); }, "'x_fp' must be x_fp.1.bin"},
      {"absolute activation path", [&] { with([&](json& j) { j["x_fp"] = fs::absolute(victim).string(); }); }, "'x_fp' must be"},
      {"bad checksum field", [&] { with([](json& j) { j["x_fp_hash"] = "zz"; }); }, "with a checksum"},
      {"writer total lies", [&] { with([](json& j) { j["outputs"][0]["writer"]["total"] = 12345; }); }, "disagree with the entries"},
      {"writer byte range lies", [&] { with([](json& j) { j["outputs"][0]["writer"]["entries"][0]["end"] = 1u << 30; }); }, "byte range"},
      {"writer extra shard", [&] { with([](json& j) { j["outputs"][0]["writer"]["closed"].push_back(json::array()); j["outputs"][0]["writer"]["closed_hash"].push_back("0000000000000000"); }); }, ".shard_0: missing"},
      {"writer holds a tensor of a later block", [&] { with([](json& j) { j["outputs"][0]["writer"]["entries"][0]["name"] = "model.layers.3.mlp.up_proj.weight"; }); }, "not a tensor of the embeddings or a written block"},
      {"writer entry with another shape", [&] { with([](json& j) { j["outputs"][0]["writer"]["entries"][0]["shape"] = {1, 1}; j["outputs"][0]["writer"]["entries"][0]["end"] = j["outputs"][0]["writer"]["entries"][0]["begin"].get<uint64_t>() + 4; }); }, "differs from the model's"},
      {"second output's writer lies", [&] { with([](json& j) { j["outputs"][1]["writer"]["total"] = 7; }); }, "disagree with the entries"},
      {"an output missing", [&] { with([](json& j) { j["outputs"].erase(1); }); }, "'outputs' must be an array of 2"},
      {"extra names a foreign key", [&] { with([](json& j) { j["outputs"][0]["extra"]["../../etc"] = {{"bits", 16}, {"data_type", "fp"}}; }); }, "'extra' names"},
      {"truncated state", [&] { std::ofstream(state_path, std::ios::trunc) << good.substr(0, good.size() / 2); }, "not a JSON object"},
      {"truncated activations", [&] { fs::resize_file(act, fs::file_size(act) - 4); }, "size"},
      {"flipped activation byte", [&] { std::fstream f(act, std::ios::in | std::ios::out | std::ios::binary); f.seekp(17); f.put('\x5a'); }, "checksum mismatch"},
      {"truncated shard data", [&] { const std::string d = partial + "/auto-round/.shard_data.0"; fs::resize_file(d, fs::file_size(d) / 2); }, "truncated"},
  };
  for (const auto& c : cases) {
    const std::string act_bytes = read_text_file(act), data_bytes = read_text_file(partial + "/auto-round/.shard_data.0");
    c.tamper();
    const auto before = snapshot(partial);
    try {
      quantize_model(o);
      ADD_FAILURE() << c.what << ": accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::InvalidInput) << c.what;
      EXPECT_NE(std::string(e.what()).find(state_path), std::string::npos) << c.what << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find(c.msg), std::string::npos) << c.what << ": " << e.what();
    }
    EXPECT_EQ(snapshot(partial), before) << c.what << ": the refused resume changed its state";
    EXPECT_EQ(read_text_file(victim), "not yours") << c.what;
    std::ofstream(state_path, std::ios::trunc | std::ios::binary) << good;  // undo
    std::ofstream(act, std::ios::trunc | std::ios::binary) << act_bytes;
    std::ofstream(partial + "/auto-round/.shard_data.0", std::ios::trunc | std::ios::binary) << data_bytes;
  }
  fs::remove(victim);
}
}  // namespace

// --resume: a run killed with SIGKILL after some blocks, restarted with the same options, continues
// from the last finished block and writes exactly the bytes of an uninterrupted run.
TEST(Pipeline, ResumeAfterSigkillIsByteIdentical) {
  std::string m = tmpdir("rm"), ref = tmpdir("rref"), q = tmpdir("rq");
  auto cfg = tiny_llama_config(4);
  cfg["hidden_size"] = 128;
  cfg["intermediate_size"] = 256;
  write_synthetic_model(m, cfg, 12);
  auto o = small_opts(m, ref, 40);
  o.format = "auto_round,auto_gptq";  // the state holds one writer per output (Cli tests resume one)
  quantize_model(o);
  o.output_dir = q;
  o.resume = true;
  const std::string state = q + ".partial/resume_state.json";
  ASSERT_TRUE(test::kill_after_block_one([&] { quantize_model(o); }, state))
      << "the child finished before it could be killed";
  EXPECT_FALSE(fs::exists(q));  // nothing published yet
  auto other = o;
  other.tune.seed = 99;
  EXPECT_THROW(quantize_model(other), Error);  // state from other options is refused
  expect_tampered_states_refused(o, q + ".partial");
  QuantizeReport r = quantize_model(o);
  ASSERT_FALSE(r.notes.empty());
  EXPECT_NE(r.notes.back().find("resumed after block"), std::string::npos);
  EXPECT_LT(r.blocks.size(), 4u);  // finished blocks were not redone
  for (const char* sub : {"/auto-round", "/auto-gptq"}) {
    EXPECT_EQ(read_text_file(q + sub + "/model.safetensors"), read_text_file(ref + sub + "/model.safetensors")) << sub;
    EXPECT_EQ(read_text_file(q + sub + "/config.json"), read_text_file(ref + sub + "/config.json")) << sub;
  }
  EXPECT_FALSE(fs::exists(q + ".partial"));
  EXPECT_FALSE(fs::exists(q + "/resume_state.json"));
  fs::remove_all(m);
  fs::remove_all(ref);
  fs::remove_all(q);
}

TEST(Pipeline, BadOptionsLeaveNoOutput) {
  std::string m = tmpdir("bm"), q = tmpdir("bq");
  write_synthetic_model(m, tiny_llama_config(1), 5);
  auto o = small_opts(m, q, 0);
  o.fmt.bits = 5;
  EXPECT_THROW(quantize_model(o), Error);
  EXPECT_FALSE(fs::exists(q));
  o = small_opts(m, q, 0);
  o.calib.seqlen = 100000;  // longer than max positions, given explicitly
  o.calib.seqlen_given = true;
  EXPECT_THROW(quantize_model(o), Error);
  o = small_opts(m, q, 0);
  quantize_model(o);
  EXPECT_THROW(quantize_model(o), Error);  // exists, no --overwrite
  o.overwrite = true;
  quantize_model(o);
  for (const auto& e : fs::directory_iterator(fs::path(q).parent_path()))
    EXPECT_EQ(e.path().string().find(q + ".tmp"), std::string::npos) << "leftover " << e.path();
  fs::remove_all(m);
  fs::remove_all(q);
}

TEST(Pipeline, Stories260kSignRoundBeatsRtnOnKl) {
  AR_REQUIRE_FIXTURES(fx);
  std::string conv = tmpdir("s260"), rtn = tmpdir("rtn"), sr = tmpdir("sr");
  test::convert_stories260k(fx, conv);
  std::string optr = tmpdir("optrtn");
  auto o = small_opts(conv, rtn, 0);
  o.calib.nsamples = 16;
  o.calib.seqlen = 128;
  o.disable_opt_rtn = true;
  quantize_model(o);
  o.disable_opt_rtn = false;
  o.output_dir = optr;
  quantize_model(o);
  o.output_dir = sr;
  o.tune.iters = 50;
  QuantizeReport r = quantize_model(o);
  ASSERT_EQ(r.blocks.size(), 5u);
  // AutoRound's shape rule: gate/up (172 x 64) and down (64 x 172) are not multiples of 32.
  EXPECT_EQ(r.blocks[0].quantized.size(), 4u);
  EXPECT_EQ(r.blocks[0].kept_fp.size(), 3u);
  auto tok = load_tokenizer(conv);
  std::string text = read_text_file(fx + "/text/tinystories/tinystories_sample.txt").substr(300000, 60000);
  auto ids = tok->encode(text);
  auto fp = HfModel::open(conv), mr = HfModel::open(rtn), mo = HfModel::open(optr), ms = HfModel::open(sr);
  Context ctx(Device{}, 2);
  Transformer tf(*fp, ctx, true), tr(*mr, ctx, true), to(*mo, ctx, true), ts(*ms, ctx, true);
  CompareResult kr = compare_models(tr, tf, ids, 256, tok->bos()), ko = compare_models(to, tf, ids, 256, tok->bos()),
                ks = compare_models(ts, tf, ids, 256, tok->bos());
  std::printf("stories260K W4G32: KL RTN %.5f, opt-RTN %.5f, SignRound %.5f; top-1 %.4f / %.4f / %.4f\n", kr.kl_mean,
              ko.kl_mean, ks.kl_mean, kr.top1_agreement, ko.top1_agreement, ks.top1_agreement);
  EXPECT_LT(ks.kl_mean, kr.kl_mean);
  EXPECT_LT(ko.kl_mean, kr.kl_mean);
  fs::remove_all(optr);
  fs::remove_all(conv);
  fs::remove_all(rtn);
  fs::remove_all(sr);
}

// --quant_lm_head: lm_head is tuned on the final-normed chain and packed; the loader reads it back as
// exactly the tuned QDQ weights (auto_round: extra_config names it; auto_gptq: "lm_head": true); a
// tied lm_head stays in 16 bit with a note; AWQ cannot carry it and stops before writing.
TEST(Pipeline, QuantLmHeadTunesPacksAndLoadsBack) {
  std::string m = tmpdir("lmm"), a = tmpdir("lma"), f = tmpdir("lmf"), g = tmpdir("lmg");
  auto cfg = tiny_llama_config(1);
  cfg["vocab_size"] = 320;  // lm_head [320, 64]: multiples of 32
  write_synthetic_model(m, cfg, 14);
  auto o = small_opts(m, f, 6);
  o.quant_lm_head = true;
  o.format = "fake";
  QuantizeReport rf = quantize_model(o);
  ASSERT_TRUE(rf.lm_head_quantized);
  EXPECT_LT(rf.lm_head_loss_best, rf.lm_head_loss_first);
  o.output_dir = a;
  o.format = "auto_round";
  quantize_model(o);
  auto conf = nlohmann::json::parse(read_text_file(a + "/config.json"));
  EXPECT_EQ(conf["quantization_config"]["extra_config"]["lm_head"]["bits"], 4);
  Context ctx(Device{}, 2);
  auto ma = HfModel::open(a), mf = HfModel::open(f), m0 = HfModel::open(m);
  EXPECT_TRUE(ma->has("lm_head.qweight"));
  EXPECT_FALSE(ma->has("lm_head.weight"));
  Tensor ha = ma->load_lm_head(ctx), hf = mf->load_lm_head(ctx), h0 = m0->load_lm_head(ctx);
  double diff = 0, moved = 0;
  for (int64_t i = 0; i < ha.numel(); ++i) {
    // fake stores fp16 of the QDQ weight; the packed form is exact up to the fp16 scale.
    diff = std::max(diff, double(std::fabs(ha.f32()[i] - hf.f32()[i])));
    moved = std::max(moved, double(std::fabs(ha.f32()[i] - h0.f32()[i])));
  }
  EXPECT_LT(diff, 2e-3);
  EXPECT_GT(moved, 1e-4);
  o.output_dir = g;
  o.format = "auto_gptq";
  quantize_model(o);
  EXPECT_EQ(nlohmann::json::parse(read_text_file(g + "/config.json"))["quantization_config"]["lm_head"], true);
  o.format = "auto_awq";
  o.output_dir = g + "_awq";
  EXPECT_THROW(quantize_model(o), Error);
  EXPECT_FALSE(fs::exists(g + "_awq"));
  for (auto& d : {m, a, f, g}) fs::remove_all(d);
  // Tied embeddings: kept in 16 bit, with a note.
  cfg["tie_word_embeddings"] = true;
  write_synthetic_model(m, cfg, 15);
  o = small_opts(m, a, 2);
  o.quant_lm_head = true;
  QuantizeReport rt = quantize_model(o);
  EXPECT_FALSE(rt.lm_head_quantized);
  EXPECT_TRUE(test::any_contains(rt.notes, "tied to the embeddings"));
  fs::remove_all(m);
  fs::remove_all(a);
}

// GPTQ / AWQ outputs are fp16 throughout (as AutoRound writes them, and as vLLM's kernels want):
// unquantized tensors converted, torch_dtype float16; auto_round keeps the source dtype. A value the
// fp16 format cannot hold stops the run naming the tensor, with nothing written.
TEST(Pipeline, GptqAndAwqOutputsAreFp16) {
  std::string m = tmpdir("f16m"), q = tmpdir("f16q");
  write_synthetic_model(m, tiny_llama_config(1), 16);
  auto dtype_of = [](const std::string& dir, const std::string& name) {
    auto f = SafetensorsFile::open(dir + "/model.safetensors");
    return f->find(name)->dtype;
  };
  auto o = small_opts(m, q, 0);
  o.overwrite = true;
  for (const char* fmt : {"auto_gptq", "auto_awq", "auto_round"}) {
    o.format = fmt;
    o.fmt.sym = std::string(fmt) != "auto_awq";
    quantize_model(o);
    const bool f16 = std::string(fmt) != "auto_round";
    EXPECT_EQ(dtype_of(q, "model.embed_tokens.weight"), f16 ? DType::F16 : DType::F32) << fmt;
    EXPECT_EQ(dtype_of(q, "model.layers.0.input_layernorm.weight"), f16 ? DType::F16 : DType::F32) << fmt;
    auto conf = nlohmann::json::parse(read_text_file(q + "/config.json"));
    EXPECT_EQ(conf.value("torch_dtype", std::string("-")) == "float16", f16) << fmt;
    Context ctx(Device{}, 1);
    Tensor e = HfModel::open(q)->load_embeddings(ctx), e0 = HfModel::open(m)->load_embeddings(ctx);
    for (int64_t i = 0; i < e.numel(); ++i)  // fp16 rounding only
      ASSERT_NEAR(e.f32()[i], e0.f32()[i], 1e-3 * std::fabs(e0.f32()[i]) + 1e-7);
  }
  fs::remove_all(q);
  {  // a final-norm weight fp16 cannot hold
    std::string path = m + "/model.safetensors";
    auto f = SafetensorsFile::open(path);
    size_t off = f->header().data_start + f->find("model.norm.weight")->begin;
    f.reset();
    std::FILE* fp = std::fopen(path.c_str(), "r+b");
    std::fseek(fp, long(off), SEEK_SET);
    const float big = 1e6f;
    std::fwrite(&big, 4, 1, fp);
    std::fclose(fp);
  }
  o.format = "auto_gptq";
  o.fmt.sym = true;
  o.overwrite = false;
  try {
    quantize_model(o);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'model.norm.weight' has a value beyond the fp16 range"), std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(fs::exists(q));
  o.format = "auto_round";  // keeps fp32
  quantize_model(o);
  EXPECT_TRUE(fs::exists(q + "/model.safetensors"));
  fs::remove_all(m);
  fs::remove_all(q);
}

// Live progress without a terminal (log file, nohup): lines with iteration, current and best loss and
// both ETAs during a block (every iteration with a zero interval), and the summary table at the end.
TEST(Pipeline, ProgressLinesAndSummaryWithoutATerminal) {
  std::string m = tmpdir("pm"), q = tmpdir("pq");
  write_synthetic_model(m, tiny_llama_config(2), 3);
  auto o = small_opts(m, q, 5);
  o.progress_interval_s = 0;
  testing::internal::CaptureStderr();
  QuantizeReport r = quantize_model(o);
  const std::string err = testing::internal::GetCapturedStderr();
  for (int it = 1; it < 5; ++it)
    EXPECT_NE(err.find("block 2/2 iter " + std::to_string(it) + "/5 loss "), std::string::npos) << err;
  EXPECT_NE(err.find(", block ETA "), std::string::npos) << err;
  EXPECT_NE(err.find(", run ETA "), std::string::npos) << err;
  EXPECT_EQ(err.find("phases (world"), std::string::npos) << "phase timings only with verbose";
  EXPECT_NE(err.find("block | loss first | loss best | best iter | seconds"), std::string::npos) << err;
  char row[96];
  std::snprintf(row, sizeof row, "%5d | %10.4g | %9.4g | %9d |", 2, r.blocks[1].loss_first, r.blocks[1].loss_best,
                r.blocks[1].best_iter);
  EXPECT_NE(err.find(row), std::string::npos) << row << "\n" << err;
  EXPECT_NE(err.find("total: 2 blocks in"), std::string::npos) << err;
  // The start summary: model, method, layer plan, calibration, memory estimate.
  EXPECT_NE(err.find("model: " + m + " (LlamaForCausalLM, 2 blocks"), std::string::npos) << err;
  EXPECT_NE(err.find("quantizing W4G32 sym with SignRound, 5 iterations, format auto_round"), std::string::npos) << err;
  EXPECT_NE(err.find("quantized Linears: self_attn.q_proj"), std::string::npos) << err;
  EXPECT_NE(err.find("calibration: 8 samples x 64 tokens"), std::string::npos) << err;
  EXPECT_NE(err.find("estimated peak memory: "), std::string::npos) << err;
  // With the default interval (10 s) a run this short prints no in-block line at all.
  fs::remove_all(q);
  o.progress_interval_s = 10;
  testing::internal::CaptureStderr();
  quantize_model(o);
  EXPECT_EQ(testing::internal::GetCapturedStderr().find(" iter 1/5 "), std::string::npos);
  fs::remove_all(m);
  fs::remove_all(q);
}

// The loaders' shape rules per format (issue 11, item 5): a 576-wide input at group 128 (SmolLM-135M's
// hidden size) has a partial last group that no GPTQ/AWQ/auto-round loader reads, so it stays in 16 bit
// for every packed format; the fake format (dequantized weights) has no such rule.
TEST(Pipeline, LoaderShapeRulesPerFormat) {
  for (const char* f : {"auto_round", "auto_gptq", "auto_awq"}) {
    EXPECT_NE(loader_shape_rule(f, 1536, 576, 128).find("in_features 576 not a multiple of group_size 128"), std::string::npos) << f;
    EXPECT_EQ(loader_shape_rule(f, 576, 1536, 128), "") << f;  // out 576: whole groups along the input
    EXPECT_EQ(loader_shape_rule(f, 1536, 576, 64), "") << f;   // 576 = 9 x 64
    EXPECT_EQ(loader_shape_rule(f, 1536, 576, -1), "") << f;   // per channel: one group of any width
  }
  EXPECT_EQ(loader_shape_rule("fake", 1536, 576, 128), "");
  EXPECT_NE(loader_shape_rule("auto_awq", 36, 256, 128).find("out_features 36 not a multiple of 8"), std::string::npos);
  EXPECT_EQ(loader_shape_rule("auto_gptq", 36, 256, 128), "");
  LayerRules r;
  r.group_size = 128;
  r.formats = {"fake", "auto_gptq"};  // several formats: a rule of any of them keeps the layer
  EXPECT_NE(kept_fp_reason("model.layers.0.self_attn.q_proj", 576, 576, r).find("(auto_gptq)"), std::string::npos);
  r.formats = {"fake"};
  EXPECT_EQ(kept_fp_reason("model.layers.0.self_attn.q_proj", 576, 576, r), "");
}

// The scheme's default group (128) on a 64-wide model: halved to 64 with a note, so the Linears are
// quantized in whole groups; an explicit --group_size 128 is kept and those Linears stay in 16 bit.
TEST(Pipeline, DefaultGroupAdaptsToTheModelAndAnExplicitOneIsKept) {
  std::string m = tmpdir("gm"), q = tmpdir("gq");
  write_synthetic_model(m, tiny_llama_config(1), 2);
  auto o = small_opts(m, q, 0);
  o.fmt.group_size = 128;
  QuantizeReport r = quantize_model(o);
  EXPECT_TRUE(test::any_contains(r.notes, "group_size 128 -> 64 for this model")) << r.notes.size();
  ASSERT_EQ(r.blocks.size(), 1u);
  EXPECT_EQ(r.blocks[0].quantized.size(), 7u);
  EXPECT_EQ(nlohmann::json::parse(read_text_file(q + "/quantization_config.json"))["group_size"], 64);
  fs::remove_all(q);
  o.group_size_given = true;
  r = quantize_model(o);
  EXPECT_FALSE(test::any_contains(r.notes, "group_size 128 -> 64"));
  EXPECT_EQ(r.blocks[0].quantized, std::vector<std::string>{"model.layers.0.mlp.down_proj"});  // in = 128
  ASSERT_EQ(r.blocks[0].kept_fp.size(), 6u);
  EXPECT_NE(r.blocks[0].kept_fp[0].find("in_features 64 not a multiple of group_size 128"), std::string::npos);
  fs::remove_all(m);
  fs::remove_all(q);
}

TEST(Pipeline, LayerRuleNamesTheReasonAndTheSummaryShowsIt) {
  LayerRules r;
  EXPECT_EQ(kept_fp_reason("model.layers.0.mlp.down_proj", 64, 172, r), "shape [64, 172] not a multiple of 32");
  r.fp_layers = {"layers.3."};
  EXPECT_EQ(kept_fp_reason("model.layers.3.mlp.up_proj", 256, 128, r), "--fp_layers layers.3.");
  EXPECT_EQ(kept_fp_reason("model.layers.13.mlp.up_proj", 256, 128, r), "");
  auto cfg = parse_model_config(tiny_llama_config(4), "c");
  QuantizeOptions o;
  o.model_dir = "m";
  o.fmt.group_size = 32;  // whole groups in every Linear of the 64-wide model
  o.fp_layers = {"layers.1.mlp"};
  bool kept_line = false;
  for (const auto& l : run_summary(cfg, o, 8, 64, false))
    if (l.rfind("kept in 16 bit: ", 0) == 0) {
      kept_line = true;
      EXPECT_NE(l.find("mlp.gate_proj in 1 of 4 blocks (--fp_layers layers.1.mlp)"), std::string::npos) << l;
      EXPECT_EQ(l.find("self_attn"), std::string::npos) << l;
    }
  EXPECT_TRUE(kept_line);
}
