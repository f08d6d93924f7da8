// Calibration samples for block tuning (autoround-spec.md §1.2): token sequences of exactly
// `seqlen` tokens. --dataset is a comma-separated list of sources, each `PATH[:key=value...]`
// (PATH: text file, JSONL, or directory; keys: concat=true|false, num=N (samples from this source),
// field=NAME (JSONL field, default text)). Documents are tokenized with the model's special tokens;
// a JSONL field holding an array of integers is a document already tokenized (auto_round's lists of
// token ids: `{"input_ids": [1, 15043, ...]}` with field=input_ids), taken as it is.
// Unpacked (JSONL's default, as AutoRound): a document gives one sample of its first seqlen tokens,
// or none if it is shorter. Packed (plain text's default, or concat=true): as AutoRound's concat,
// each document's BOS/EOS are stripped, the bodies are joined into one stream (JSONL documents first
// truncated to seqlen, as AutoRound's tokenizer truncates them; plain text is one stream), and each
// sample is BOS + the next seqlen-1 (or seqlen-2 with an EOS at the end, where the tokenizer adds
// EOS) tokens. AutoRound's repeat filter drops samples whose last token occurs more than seqlen/2
// times. Samples are drawn by seeded reservoir sampling, so a source of any size streams through in
// bounded memory and the choice does not depend on reading order. An empty --dataset uses the
// built-in corpus (plain text, packed, with a notice). A seqlen beyond the model's context is refused
// when given explicitly and clamped with a note when it is the default.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/tokenizer/tokenizer.h"

namespace ar::quant {

struct CalibOptions {
  std::string dataset;  // empty: built-in corpus
  int64_t nsamples = 128, seqlen = 2048;
  uint64_t seed = 42;
  bool seqlen_given = false;  // --seqlen on the command line: never clamped
  int64_t max_context = 0;    // the model's max_position_embeddings (0: no limit)
  std::string context_field = "max_position_embeddings";  // where max_context comes from, for the messages
  int64_t vocab_size = 0;     // the model's embedding rows: token ids in a source must be below (0: the tokenizer's)
};

struct CalibData {
  std::vector<int32_t> ids;  // [n * seqlen]
  int64_t n = 0, seqlen = 0;
  std::vector<std::string> notes;  // e.g. "using the built-in corpus", "reduced nsamples to 37"
};

CalibData build_calibration(const Tokenizer& tok, const CalibOptions& opt);

// One source of a --dataset spec. Parsing is strict: every key at most once, num= a decimal integer
// in 1..2^20, concat= true|false|1|0, field= non-empty, PATH non-empty; anything else is refused
// (InvalidInput) naming the sub-option and the value.
struct DatasetSource {
  std::string path, field = "text";
  std::optional<bool> concat;  // unset: packed for plain text, not for JSONL
  int64_t num = -1;  // -1: share of --nsamples
};
std::vector<DatasetSource> parse_dataset_spec(const std::string& spec);

// The built-in calibration corpus (src/quant/corpus/builtin.txt; sources and licenses in NOTICE there).
const std::string& builtin_corpus();

}  // namespace ar::quant
