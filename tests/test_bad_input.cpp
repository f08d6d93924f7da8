// Table-driven bad-input test: each row builds one bad input (a model, tokenizer, config or text
// variant, or a bad command line) in a fresh temporary directory, runs the real `autoround` binary
// there and asserts the exit code, one "error: ..." line containing a substring that names the
// file/tensor/option, and that the temporary tree is unchanged (same paths, sizes and content hashes:
// no file changed, none added, so no partial output either).
//
// To add a case, append a row to kCases: {name, setup, args, exit code, message substring}. Setups
// mutate the base tree (bad_input_tree.h): the model in "m", text in "t.txt", an unrelated file
// "notes/keep.txt" and an empty directory "empty_dir". Args are relative to the tree.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <limits>
#include <set>

#include "bad_input_tree.h"
#include "model/synthetic.h"
#include "test_util.h"

namespace fs = std::filesystem;
using ar::test::Tree;

namespace {

struct Case {
  const char* name;
  std::function<void(const Tree&)> setup;  // nullptr: the base tree as it is
  std::string args;
  int code;
  std::string message;
};

const std::string kQ = "quantize --model m --iters 0 --nsamples 2 --seqlen 16 --output_dir out ";
const std::string kQ0 = "quantize --model m --output_dir out ";  // for rows that set the counts themselves
const std::string kEval = "eval --model m --text t.txt ";
const std::string kGen = "generate --model m -n 4 ";
const std::string kLogits = "logits --model m --text hello --out o.bin ";

// Setup shorthands.
std::function<void(const Tree&)> config(std::function<void(nlohmann::json&)> f) {
  return [f](const Tree& t) { t.edit_config(f); };
}
std::function<void(const Tree&)> header(std::function<void(nlohmann::ordered_json&)> f) {
  return [f](const Tree& t) { t.edit_header(f); };
}
std::function<void(const Tree&)> poison(const std::string& tensor, float v) {
  return [tensor, v](const Tree& t) { t.poison(tensor, 3, v); };
}
std::function<void(const Tree&)> dtype(const std::string& tensor, const std::string& dt) {
  return header([tensor, dt](nlohmann::ordered_json& h) { h[tensor]["dtype"] = dt; });
}
std::function<void(const Tree&)> set(const char* field, nlohmann::json v) {
  return config([field, v](nlohmann::json& c) { c[field] = v; });
}
void fifo(const Tree& t, const std::string& rel) {
  if (mkfifo(t.p(rel).c_str(), 0644) != 0) throw std::runtime_error("mkfifo " + rel);
}
const float kNan = std::numeric_limits<float>::quiet_NaN(), kInf = std::numeric_limits<float>::infinity();

const std::vector<Case> kCases = {
    // ---- Model files: safetensors structure (class 4)
    {"DuplicateTensorName", [](const Tree& t) { t.duplicate_header_key("model.norm.weight"); }, kEval, 1,
     "m/model.safetensors: header: tensor name 'model.norm.weight' appears twice"},
    {"OverlappingTensors",
     header([](auto& h) { h["model.norm.weight"]["data_offsets"] = h["lm_head.weight"]["data_offsets"]; h["model.norm.weight"]["shape"] = h["lm_head.weight"]["shape"]; }),
     kQ, 1, "overlap"},
    {"ZeroSizeTensorInsideAnother",
     header([](auto& h) {
       const size_t b = h["model.embed_tokens.weight"]["data_offsets"][0].template get<size_t>() + 8;
       h["extra.empty"] = {{"dtype", "F32"}, {"shape", {0}}, {"data_offsets", {b, b}}};
     }),
     kGen, 1, "'model.embed_tokens.weight' and 'extra.empty' overlap"},
    {"OffsetsPastEndOfFile",
     header([](auto& h) { h["model.norm.weight"]["data_offsets"] = {1u << 30, (1u << 30) + 256}; }), kLogits, 1,
     "m/model.safetensors: truncated: tensor 'model.norm.weight' ends at data byte"},
    {"HeaderNotJson", [](const Tree& t) { t.set_header_text("{\"a\": [1, 2"); }, kEval, 1,
     "m/model.safetensors: header: not valid JSON"},
    {"DuplicateIndexEntry", [](const Tree& t) { t.shard_and_duplicate_index_key("model.norm.weight"); }, kEval, 1,
     "m/model.safetensors.index.json: key 'model.norm.weight' appears twice"},
    {"MissingTensor", header([](auto& h) { h.erase("model.layers.0.post_attention_layernorm.weight"); }), kGen, 1,
     "tensor 'model.layers.0.post_attention_layernorm.weight' is missing"},
    {"ShapeDisagreesWithConfig", set("intermediate_size", 96), kQ, 1,
     "tensor 'model.layers.0.mlp.gate_proj.weight' has shape [128, 64], config.json implies [96, 64]"},
    // ---- Model files: dtype must fit the role
    {"IntegerNorm", dtype("model.norm.weight", "I32"), kEval, 1,
     "tensor 'model.norm.weight' has dtype I32; a norm weight must be floating point"},
    {"IntegerBlockNorm", dtype("model.layers.0.input_layernorm.weight", "I32"), kQ, 1,
     "tensor 'model.layers.0.input_layernorm.weight' has dtype I32; a norm weight must be floating point"},
    {"IntegerEmbeddings", dtype("model.embed_tokens.weight", "I32"), kQ, 1,
     "tensor 'model.embed_tokens.weight' has dtype I32; the embedding table must be floating point"},
    {"IntegerLmHead", dtype("lm_head.weight", "I32"), kGen, 1,
     "tensor 'lm_head.weight' has dtype I32; lm_head must be floating point"},
    // ---- Model files: non-finite values anywhere the computation reads
    {"NanEmbeddings", poison("model.embed_tokens.weight", kNan), kEval, 1,
     "m/model.safetensors: tensor model.embed_tokens.weight: non-finite value nan at element 3"},
    {"InfFinalNorm", poison("model.norm.weight", kInf), kGen, 1, "tensor model.norm.weight: non-finite value inf"},
    {"NanBlockNorm", poison("model.layers.0.input_layernorm.weight", kNan), kQ, 1,
     "tensor model.layers.0.input_layernorm.weight: non-finite value nan"},
    {"NegInfLmHead", poison("lm_head.weight", -kInf), kLogits, 1, "tensor lm_head.weight: non-finite value -inf"},
    {"NanLmHeadQuantize", poison("lm_head.weight", kNan), kQ, 1, "tensor lm_head.weight: non-finite value nan"},
    // ---- Model files: finite weights whose activations overflow fp32 stop eval/generate/logits at the
    // first block whose output is not finite (quantize checks the same per block)
    {"OverflowingActivationsEval", poison("model.layers.0.post_attention_layernorm.weight", 3e38f), kEval, 1,
     "m: block 0 (model.layers.0.*) output: non-finite activation"},
    {"OverflowingActivationsGenerate", poison("model.layers.0.post_attention_layernorm.weight", 3e38f), kGen, 1,
     "m: block 0 (model.layers.0.*) output: non-finite activation"},
    {"OverflowingActivationsGeneratePrompt", poison("model.layers.0.post_attention_layernorm.weight", 3e38f),
     kGen + "--prompt hello", 1, "m: block 0 (model.layers.0.*) output: non-finite activation"},
    {"OverflowingActivationsLogits", poison("model.layers.0.post_attention_layernorm.weight", 3e38f), kLogits, 1,
     "m: block 0 (model.layers.0.*) output: non-finite activation"},
    {"OverflowingActivationsKl", poison("model.layers.0.post_attention_layernorm.weight", 3e38f),
     "eval --model notes/../m --ref-model m --text t.txt", 1, "block 0 (model.layers.0.*) output: non-finite"},
    // ---- Model files: a config.json with fewer layers than the checkpoint stores
    {"ConfigFewerLayersThanStored",
     [](const Tree& t) {
       ar::write_synthetic_model(t.p("m"), ar::tiny_llama_config(2), 5);
       t.edit_config([](nlohmann::json& c) { c["num_hidden_layers"] = 1; });
     },
     kEval, 1,
     "m/model.safetensors: tensor 'model.layers.1.input_layernorm.weight' is stored but config.json says "
     "num_hidden_layers 1"},
    // ---- Model files: a context shorter than the command needs names the model's field
    {"ContextShorterThanEvalWindow", set("max_position_embeddings", 3), kEval, 1,
     "m/config.json: max_position_embeddings 3 is smaller than the 4 tokens eval needs"},
    {"ContextShorterThanEvalCtx", set("max_position_embeddings", 16), kEval + "--ctx 32", 1,
     "m/config.json: max_position_embeddings 16 is smaller than the 32 tokens eval --ctx 32 needs"},
    {"ContextShorterThanPromptAndOneToken", set("max_position_embeddings", 1), kGen, 1,
     "m/config.json: max_position_embeddings 1 is smaller than the 2 tokens generate needs"},
    {"ContextShorterThanLogitsText", set("max_position_embeddings", 2), kLogits, 1,
     "m/config.json: max_position_embeddings 2 is smaller than the"},
    // ---- Model files: config sizes refused before allocating
    {"HugeHiddenSize", set("hidden_size", int64_t(1000000000000)), kEval, 1,
     "m/config.json: field 'hidden_size': 1000000000000 exceeds the limit of 131072"},
    {"HugeVocab", set("vocab_size", int64_t(1) << 40), kQ, 1, "field 'vocab_size': 1099511627776 exceeds the limit"},
    {"HugeLayerCount", set("num_hidden_layers", 1000000000), kGen, 1, "field 'num_hidden_layers': 1000000000 exceeds"},
    {"HugeContext", set("max_position_embeddings", int64_t(1) << 40), kLogits, 1,
     "field 'max_position_embeddings': 1099511627776 exceeds"},
    {"VocabTimesHiddenTooLarge",
     config([](auto& c) { c["vocab_size"] = 1 << 24; c["hidden_size"] = 1 << 16; c["num_attention_heads"] = 256; }),
     kEval, 1, "field 'vocab_size': implies a tensor of 1099511627776 elements"},
    {"MoreKvHeadsThanHeads", set("num_key_value_heads", 8), kQ, 1, "field 'num_key_value_heads'"},
    {"NegativeHiddenSize", set("hidden_size", -64), kGen, 1, "field 'hidden_size': must be a positive integer"},
    {"ConfigNotJson", [](const Tree& t) { t.write("m/config.json", "{\"hidden_size\": "); }, kEval, 1,
     "m/config.json: invalid JSON"},
    // ---- Tokenizer ids must fit the embeddings, for every command
    {"TokenizerBeyondVocabQuantize", [](const Tree& t) { ar::write_byte_tokenizer(t.p("m/tokenizer.bin"), 400); }, kQ,
     1, "m: the tokenizer has 400 tokens (ids up to 399) but config.json vocab_size is 300"},
    {"TokenizerBeyondVocabEval", [](const Tree& t) { ar::write_byte_tokenizer(t.p("m/tokenizer.bin"), 400); }, kEval,
     1, "the tokenizer has 400 tokens"},
    {"TokenizerBeyondVocabGenerate", [](const Tree& t) { ar::write_byte_tokenizer(t.p("m/tokenizer.bin"), 301); },
     kGen, 1, "the tokenizer has 301 tokens"},
    {"TokenizerBeyondVocabLogits", [](const Tree& t) { ar::write_byte_tokenizer(t.p("m/tokenizer.bin"), 400); },
     kLogits, 1, "the tokenizer has 400 tokens"},
    // ---- Options (class 5): usage errors at parse time, exit 2, option and bound named
    {"BatchSizeZero", nullptr, kQ + "--batch_size 0", 2, "error: --batch_size 0 is out of range (1 to 65536)"},
    {"ItersNegative", nullptr, kQ0 + "--iters -1", 2, "--iters -1 is out of range (0 to 1000000)"},
    {"GradAccumZero", nullptr, kQ + "--gradient_accumulate_steps 0", 2,
     "--gradient_accumulate_steps 0 is out of range (1 to 65536)"},
    {"NsamplesZero", nullptr, kQ0 + "--nsamples 0", 2, "--nsamples 0 is out of range (1 to 1048576)"},
    {"SeqlenOne", nullptr, kQ0 + "--seqlen 1", 2, "--seqlen 1 is out of range (2 to 16777216)"},
    {"QuantizeThreadsHuge", nullptr, kQ + "--threads 100000", 2, "--threads 100000 is out of range (0 to 1024)"},
    {"GenerateThreadsHuge", nullptr, kGen + "--threads 100000", 2, "--threads 100000 is out of range (0 to 1024)"},
    {"EvalThreadsNegative", nullptr, kEval + "--threads -3", 2, "--threads -3 is out of range (0 to 1024)"},
    {"GenerateTokensNegative", nullptr, "generate --model m -n -1", 2, "-n -1 is out of range (0 to 16777216)"},
    {"EvalCtxOne", nullptr, kEval + "--ctx 1", 2, "--ctx 1 is too short"},
    {"EvalCtxNegative", nullptr, kEval + "--ctx -5", 2, "--ctx -5 is out of range"},
    {"EvalBatchZero", nullptr, kEval + "--batch 0", 2, "--batch 0 is out of range (1 to 65536)"},
    {"EvalEmptyTextField", nullptr, kEval + "--text-field ''", 2, "--text-field must name a JSONL field"},
    {"LrNan", nullptr, kQ + "--lr nan", 2, "--lr nan is out of range (0 to 1e+06)"},
    {"LrNegative", nullptr, kQ + "--lr -0.1", 2, "--lr -0.1 is out of range (0 to 1e+06)"},
    {"MinmaxLrInf", nullptr, kQ + "--minmax_lr inf", 2, "--minmax_lr inf is out of range (0 to 1e+06)"},
    {"LrHuge", nullptr, kQ + "--lr 1e308", 2, "--lr 1e+308 is out of range (0 to 1e+06)"},
    {"BitsFive", nullptr, kQ + "--bits 5", 2, "--bits 5 is not supported (2, 3, 4, 8)"},
    {"GroupSizeZero", nullptr, kQ + "--group_size 0", 2, "--group_size 0 is not supported"},
    {"GroupSizeBelowMinusOne", nullptr, kQ + "--group_size -7", 2, "--group_size -7 is out of range"},
    {"UnknownScheme", nullptr, kQ + "--scheme W5A16", 2, "--scheme 'W5A16' is not supported"},
    {"UnknownRecipe", nullptr, kQ + "--recipe fastest", 2, "--recipe 'fastest' is not supported"},
    {"UnknownFormat", nullptr, kQ + "--format gguf", 2, "--format 'gguf' is not supported"},
    {"FormatEmptyEntry", nullptr, kQ + "--format auto_round,,", 2,
     "error: --format 'auto_round,,' has an empty entry (formats are separated by single commas)"},
    {"FormatTrailingComma", nullptr, kQ + "--format fake,", 2, "--format 'fake,' has an empty entry"},
    {"AwqNeedsFourBits", nullptr, kQ + "--format auto_awq --bits 2", 2, "--format auto_awq needs --bits 4"},
    {"ConvertUnknownDtype", nullptr, "convert --llama2c x.bin --tokenizer y.bin --out c --dtype int8", 2,
     "--dtype 'int8' is not supported (fp32, bf16, fp16)"},
    // ---- --dataset sub-options, parsed strictly
    {"DatasetNumNotANumber", nullptr, kQ + "--dataset t.txt:num=abc", 2, "--dataset 't.txt:num=abc': :num= 'abc' is not a whole number"},
    {"DatasetNumNegative", nullptr, kQ + "--dataset t.txt:num=-1", 2, ":num=-1 is out of range (1 to 1048576)"},
    {"DatasetNumEmpty", nullptr, kQ + "--dataset t.txt:num=", 2, ":num= '' is not a whole number"},
    {"DatasetNumTrailingJunk", nullptr, kQ + "--dataset t.txt:num=3x", 2, ":num= '3x' is not a whole number"},
    {"DatasetConcatMaybe", nullptr, kQ + "--dataset t.txt:concat=maybe", 2, ":concat= 'maybe' must be true or false"},
    {"DatasetFieldEmpty", nullptr, kQ + "--dataset t.txt:field=", 2, ":field= must name a JSONL field"},
    {"DatasetUnknownKey", nullptr, kQ + "--dataset t.txt:shuffle=1", 2, "sub-option 'shuffle' is unknown"},
    {"DatasetKeyTwice", nullptr, kQ + "--dataset t.txt:num=2:num=3", 2, ":num= is given twice"},
    {"DatasetNoPath", nullptr, kQ + "--dataset :num=2", 2, "no PATH before the sub-options"},
    // ---- Text sources: regular files only (a FIFO, device or socket is refused before it is opened),
    // standard input only as eval's `--text -`; each of these hung before the check (bounded by run_cli's timeout)
    {"TextIsFifo", [](const Tree& t) { fifo(t, "pipe.txt"); }, "eval --model m --text pipe.txt", 1,
     "error: --text pipe.txt: a FIFO (named pipe), not a regular file"},
    {"DatasetIsFifo", [](const Tree& t) { fifo(t, "pipe.txt"); }, kQ + "--dataset pipe.txt", 1,
     "--dataset pipe.txt: a FIFO (named pipe), not a regular file"},
    {"TextIsDevZero", nullptr, "eval --model m --text /dev/zero", 1,
     "error: --text /dev/zero: a character device, not a regular file"},
    {"DatasetIsDevZero", nullptr, kQ + "--dataset /dev/zero", 1,
     "--dataset /dev/zero: a character device, not a regular file"},
    {"ConfigIsFifo", [](const Tree& t) { fs::remove(t.p("m/config.json")); fifo(t, "m/config.json"); }, kEval, 1,
     "m/config.json: a FIFO (named pipe), not a regular file"},
    {"TextDirectoryHoldsOnlyAFifo", [](const Tree& t) { fifo(t, "empty_dir/pipe.txt"); }, "eval --model m --text empty_dir", 1,
     "empty_dir: directory holds no .txt/.jsonl/.json files"},
    {"TextStdinEmpty", nullptr, "eval --model m --text - < /dev/null", 1, "error: standard input: file is empty"},
    {"DatasetStdinRefused", nullptr, kQ + "--dataset -", 2,
     "--dataset '-': standard input ('-') is not accepted: name a file or directory"},
    // ---- Input bytes in messages are escaped: no terminal control sequence, no second line, no cut at NUL
    {"ArchitectureWithEscapeSequence", set("architectures", {"\x1b[2J\nerror: fake"}), kEval, 1,
     "m/config.json: unknown architecture '\\x1b[2J\\x0aerror: fake' (supported:"},
    {"ArchitectureWithNul", set("architectures", {std::string("Llama\0Evil", 10)}), kGen, 1,
     "unknown architecture 'Llama\\x00Evil' (supported:"},
    {"TensorNameWithEscapeSequence",
     header([](auto& h) { h["\x1b]0;owned\x07\r\xc2\x9b"] = {{"dtype", "Q9"}, {"shape", {1}}, {"data_offsets", {0, 4}}}; }),
     kEval, 1, "tensor '\\x1b]0;owned\\x07\\x0d\\xc2\\x9b' has unsupported dtype Q9"},
    // ---- Device lists consistent with --parallel_quantization
    {"DevicesWithoutParallel", nullptr, kQ + "--devices cpu:0,cpu:1", 2,
     "--devices cpu:0,cpu:1 is only used with --parallel_quantization"},
    {"ParallelMoreThanDevices", nullptr, kQ + "--parallel_quantization 3 --devices cpu:0,cpu:1", 2,
     "--parallel_quantization 3 needs 3 devices but --devices lists 2"},
    {"DeviceListedTwice", nullptr, kQ + "--parallel_quantization 2 --devices cpu:0,cpu:0", 2,
     "--devices lists cpu:0 twice"},
    {"ParallelNotANumber", nullptr, kQ + "--parallel_quantization two", 2, "--parallel_quantization 'two'"},
    {"ParallelPastTheLimit", nullptr, kQ + "--parallel_quantization 1025", 2,
     "--parallel_quantization '1025': expected off, auto or a world size from 1 to 1024"},
    {"ParallelPastLong", nullptr, kQ + "--parallel_quantization 99999999999999999999", 2,
     "a world size from 1 to 1024"},
    // ---- Output paths (class 1): never replace or contain what the tool did not create
    {"OverwriteCurrentDirectory", nullptr, kQ.substr(0, kQ.find("--output_dir")) + "--output_dir . --overwrite", 1,
     "contains an input of this run"},
    {"OverwriteCurrentDirectorySlash", nullptr, kQ.substr(0, kQ.find("--output_dir")) + "--output_dir ./ --overwrite", 1,
     "contains an input of this run"},
    {"OverwriteModelDirectory", nullptr, kQ.substr(0, kQ.find("--output_dir")) + "--output_dir m --overwrite", 1,
     "is an input of this run (m)"},
    {"OverwriteModelViaSymlink", [](const Tree& t) { fs::create_directory_symlink(t.p("m"), t.p("ln")); },
     kQ.substr(0, kQ.find("--output_dir")) + "--output_dir ln/ --overwrite", 1, "is an input of this run"},
    {"OverwriteModelParent", nullptr, kQ.substr(0, kQ.find("--output_dir")) + "--output_dir m/.. --overwrite", 1,
     "contains an input of this run"},
    {"OverwriteRoot", nullptr, kQ.substr(0, kQ.find("--output_dir")) + "--output_dir / --overwrite", 1,
     "refusing to write to the root directory"},
    {"OverwriteForeignDirectory", nullptr, kQ.substr(0, kQ.find("--output_dir")) + "--output_dir notes --overwrite", 1,
     "is not empty and has no autoround_output.json: not an output of autoround"},
    {"OutputIsAFile", nullptr, kQ.substr(0, kQ.find("--output_dir")) + "--output_dir notes/keep.txt --overwrite", 1,
     "exists and is not a directory"},
    {"OutputExistsWithoutOverwrite", nullptr, kQ.substr(0, kQ.find("--output_dir")) + "--output_dir empty_dir", 1,
     "output directory exists (pass --overwrite"},
    {"ReportOverForeignFile", nullptr, kQ + "--report notes/keep.txt --overwrite", 1,
     "file exists and was not written by autoround"},
    {"ReportOverModelConfig", nullptr, kQ + "--report m/config.json --overwrite", 1, "not written by autoround"},
    {"LogitsOverExistingFile", nullptr, "logits --model m --text hello --out notes/keep.txt", 1, "file exists"},
    {"ConvertOverCurrentDirectory", nullptr, "convert --llama2c ck.bin --tokenizer tok.bin --out . --overwrite", 1,
     "contains an input of this run"},
    // ---- Resume state (class 2): a .partial that is not ours, or from another run, is refused untouched
    {"ResumeForeignPartial", [](const Tree& t) { t.write("out.partial/data.bin", "user data"); }, kQ + "--resume", 1,
     "out.partial: exists and is not autoround resume state"},
    {"ResumeStateOfAnotherRun",
     [](const Tree& t) {
       t.write("out.partial/autoround_output.json", R"({"generator": "autoround.cpp", "kind": "quantize"})");
       t.write("out.partial/resume_state.json",
               R"({"version": 4, "fingerprint": {}, "next_block": 1, "x_fp": "../notes/keep.txt", "x_fp_hash": "0",)"
               R"( "x_q": null, "x_q_hash": "0", "outputs": [{"writer": {}, "extra": {}}]})");
     },
     kQ + "--resume", 1, "out.partial/resume_state.json: corrupt or foreign resume state"},
    {"ResumeStateNotJson",
     [](const Tree& t) {
       t.write("out.partial/autoround_output.json", R"({"generator": "autoround.cpp", "kind": "quantize"})");
       t.write("out.partial/resume_state.json", "{\"version\": 3, \"next_bl");
     },
     kQ + "--resume", 1, "resume_state.json: corrupt or foreign resume state: not a JSON object"},
    // ---- Command-line parser errors (CLI11), one line, exit 2
    {"ItersNotANumber", nullptr, kQ0 + "--iters abc", 2, "--iters"},
    {"SeedNegative", nullptr, kQ + "--seed -1", 2, "--seed: -1 is out of range (0 to 2^64-1)"},
    {"SeedPast64Bits", nullptr, kQ + "--seed 99999999999999999999", 2,
     "--seed: 99999999999999999999 is out of range (0 to 2^64-1)"},
    {"SeedNotANumber", nullptr, kQ + "--seed 12abc", 2, "--seed: 12abc is not an integer (0 to 2^64-1)"},
    {"UnknownOption", nullptr, kEval + "--frobnicate 3", 2, "--frobnicate"},
    {"MissingRequiredOption", nullptr, "eval --text t.txt", 2, "--model is required"},
    {"UnknownSubcommand", nullptr, "frobnicate", 2, "error: "},
};

class BadInput : public ::testing::TestWithParam<Case> {};

TEST_P(BadInput, OneErrorLineExitCodeAndNothingChanged) {
  const Case& c = GetParam();
  Tree t(ar::test::temp_path(std::string("bad_") + c.name));
  if (c.setup) c.setup(t);
  const auto before = t.snapshot();
  const ar::test::CliRun r = t.run_cli(c.args);
  EXPECT_EQ(r.code, c.code) << r.out;
  EXPECT_NE(r.out.find(c.message), std::string::npos) << "expected '" << c.message << "' in:\n" << r.out;
  // Progress notes ("[info] ...", e.g. the calibration summary printed before a resume state is read)
  // may precede it; the error itself is exactly one line, the last.
  std::string err = r.out;
  while (err.rfind("[info] ", 0) == 0 && err.find('\n') != std::string::npos) err = err.substr(err.find('\n') + 1);
  EXPECT_EQ(err.rfind("error: ", 0), 0u) << r.out;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << r.out;
  EXPECT_EQ(r.out.find('\x1b'), std::string::npos) << "a raw ESC byte reached the terminal";
  EXPECT_EQ(t.snapshot(), before) << "the command changed or added files";
  fs::remove_all(t.root);
}

INSTANTIATE_TEST_SUITE_P(Rows, BadInput, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<Case>& i) { return std::string(i.param.name); });

TEST(BadInputTable, HasEnoughRowsWithUniqueNames) {
  std::set<std::string> names;
  for (const Case& c : kCases) EXPECT_TRUE(names.insert(c.name).second) << c.name;
  EXPECT_GE(kCases.size(), 40u);
}

}  // namespace
