// Fuzz target: the rendezvous store's frame decoder (src/distributed/store_frame.h), the one reader of bytes
// from the network in the multi-process lane. The input is a frame's payload. Beyond "no crash", an
// accepted payload must be the canonical encoding of what was decoded (encode(decode(p)) == p): the
// decoder reads every byte exactly once and the encoder writes the same layout.
#include <cstdio>
#include <cstdlib>

#include "distributed/store_frame.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return ar::fuzz::guarded([&] {
    namespace fr = ar::dist::frame;
    const std::string_view payload(reinterpret_cast<const char*>(data), size);
    const fr::Decoded d = fr::decode(payload);
    if (!d.ok()) {
      if (!(d.msg == fr::Message{})) {
        std::fprintf(stderr, "fuzz: FINDING: a rejected payload left a half-read message\n");
        std::abort();
      }
      return;
    }
    const std::string frame = fr::encode(d.msg);
    if (frame.size() != size + 4 || std::string_view(frame).substr(4) != payload) {
      std::fprintf(stderr, "fuzz: FINDING: %s payload of %zu bytes does not re-encode to itself\n",
                   fr::op_name(d.msg.op), size);
      std::abort();
    }
  });
}
