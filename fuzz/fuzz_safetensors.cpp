// Fuzz target: a safetensors image (header length, JSON header, tensor entries; parse_safetensors),
// then every tensor it accepts is read back as fp32 through SafetensorsFile.
#include "core/context.h"
#include "fuzz_util.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return ar::fuzz::guarded([&] {
    ar::StHeader h = ar::parse_safetensors(data, size, "fuzz.safetensors");
    if (h.tensors.size() > 64) return;
    const std::string path = ar::fuzz::write_input("model.safetensors", data, size);
    auto f = ar::SafetensorsFile::open(path);
    static ar::Context ctx({}, 1);  // one worker thread, made once
    for (const auto& t : f->header().tensors)
      if (t.end - t.begin <= (size_t(1) << 20)) (void)f->load_f32(t.name, ctx);
  });
}
