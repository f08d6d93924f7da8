// Fuzz target: a --resume state (<output>.partial/resume_state.json; parse_resume_state) checked
// against a fixed run, and, when accepted, its ShardWriter state restored against real shard files
// (ShardWriter::restore validates names, ranges, sizes and checksums before touching anything). The
// shard directory is rebuilt for every input, since an accepted state may truncate its files.
#include "fuzz_util.h"
#include "resume_fixture.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const ar::ResumeExpect expect = ar::fuzz::resume_expect();
  return ar::fuzz::guarded([&] {
    const std::string dir = ar::fuzz::scratch_dir() + "/out.partial";
    const std::string bytes(reinterpret_cast<const char*>(data), size);
    ar::ResumeState s = ar::parse_resume_state(bytes, dir + "/resume_state.json", expect);
    ar::fuzz::make_partial_dir(dir);
    for (const auto& o : s.outputs) {  // one output in the fixed run
      ar::ShardWriter w(dir, 64);
      w.keep_files();
      w.restore(o.writer);
    }
  });
}
