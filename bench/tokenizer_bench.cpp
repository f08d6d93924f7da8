// Tokenizer encoding speed, single-threaded, on a text file (default: WikiText-2 test from the
// fixtures). For each tokenizer directory given: load time, MB/s over the whole file (best of 3),
// tokens produced. Last line: one JSON object.
//   tokenizer_bench [--text FILE] DIR...
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "io/mapped_file.h"
#include "model/tokenizer/tokenizer.h"

using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  std::string text_path = std::string(AR_SOURCE_DIR) + "/../shared/fixtures/text/wikitext-2-raw/wiki.test.raw";
  std::vector<std::string> dirs;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--text") == 0 && i + 1 < argc) text_path = argv[++i];
    else dirs.push_back(argv[i]);
  }
  if (dirs.empty()) {
    const std::string t = std::string(AR_SOURCE_DIR) + "/../shared/fixtures/tokenizers/";
    dirs = {t + "gpt2", t + "llama2-spm"};
  }
  const std::string text = ar::read_text_file(text_path);
  std::string json = "{\"bench\":\"tokenizer_encode\",\"text_bytes\":" + std::to_string(text.size()) + ",\"results\":[";
  for (size_t d = 0; d < dirs.size(); ++d) {
    auto t0 = Clock::now();
    auto tok = ar::load_tokenizer(dirs[d]);
    double load_s = std::chrono::duration<double>(Clock::now() - t0).count(), best = 1e30;
    size_t n = 0;
    for (int rep = 0; rep < 3; ++rep) {
      t0 = Clock::now();
      n = tok->encode(text, false).size();
      best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
    }
    double mbs = double(text.size()) / 1e6 / best;
    std::printf("%s: %s; load %.2f s; %zu tokens; %.1f MB/s\n", dirs[d].c_str(), tok->describe().c_str(), load_s, n, mbs);
    json += std::string(d ? "," : "") + "{\"dir\":\"" + dirs[d] + "\",\"tokens\":" + std::to_string(n) +
            ",\"mb_per_s\":" + std::to_string(mbs) + ",\"load_s\":" + std::to_string(load_s) + "}";
  }
  std::printf("%s]}\n", json.c_str());
  return 0;
}
