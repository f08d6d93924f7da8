// Fuzz target: calibration/evaluation text sources (TextSource): the first input byte picks plain
// text (.txt) or JSONL (.jsonl), for JSONL the field name, and whether arrays of token ids are
// accepted (calibration's input_ids); the rest is the file. Documents are streamed with a small
// chunk size so the cutting and UTF-8 carry-over paths are reached.
#include "fuzz_util.h"
#include "io/text_source.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t mode = data[0];
  return ar::fuzz::guarded([&] {
    const bool jsonl = mode & 1;
    const std::string path = ar::fuzz::write_input(jsonl ? "source.jsonl" : "source.txt", data + 1, size - 1);
    const bool ids = mode & 4;
    const std::string field = ids ? "input_ids" : (mode & 2) ? "content" : "text";
    ar::TextSourceOptions opt;
    opt.chunk_bytes = 64 + (mode >> 3);
    opt.token_id_limit = ids ? 32000 : 0;
    auto src = ar::TextSource::open(path, field, opt);
    std::string doc;
    size_t n = 0;
    while (src->next(&doc) && ++n < 100000) {
    }
  });
}
