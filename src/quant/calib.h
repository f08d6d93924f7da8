// Calibration samples for block tuning (autoround-spec.md §1.2): token sequences of exactly
// `seqlen` tokens. --dataset is a comma-separated list of sources, each `PATH[:key=value...]`
// (PATH: text file, JSONL, or directory; keys: concat=true|false, num=N (samples from this source),
// field=NAME (JSONL field, default text)). Documents are tokenized with the model's special tokens,
// truncated to seqlen; shorter ones are dropped unless concat=true packs the token stream into
// seqlen chunks; AutoRound's repeat filter drops samples whose last token occurs more than seqlen/2
// times. Samples are drawn by seeded reservoir sampling, so a source of any size streams through in
// bounded memory and the choice does not depend on reading order. An empty --dataset uses the
// built-in corpus (packed, with a notice).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/tokenizer/tokenizer.h"

namespace ar::quant {

struct CalibOptions {
  std::string dataset;  // empty: built-in corpus
  int64_t nsamples = 128, seqlen = 2048;
  uint64_t seed = 42;
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
  bool concat = false;
  int64_t num = -1;  // -1: share of --nsamples
};
std::vector<DatasetSource> parse_dataset_spec(const std::string& spec);

// The project's own calibration text (varied prose, dialogue, code, lists, numbers).
const std::string& builtin_corpus();

}  // namespace ar::quant
