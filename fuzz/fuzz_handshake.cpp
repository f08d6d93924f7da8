// Fuzz target: a peer's handshake identity (src/distributed/handshake.h), bytes from another rank over the
// rendezvous store. The input is rank 1's identity; rank 0's is fixed. Accepted or refused with an
// ar::Error, never a crash; an accepted one then goes through the comparison every rank runs, whose
// message must name rank 1 whenever it reports a difference.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "distributed/handshake.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const nlohmann::ordered_json mine = {
      {"build", "0.1.0 exe:0123456789abcdef"},
      {"options", {{"bits", 4}, {"group_size", 128}, {"iters", 200}, {"seed", 42}}},
      {"model", {{"config.json", {{"bytes", 600}, {"hash", "00ff00ff00ff00ff"}}}}},
      {"calibration", {{"n", 128}, {"seqlen", 2048}, {"tokens_hash", "1111222233334444"}}},
      {"host", "a"}};
  return ar::fuzz::guarded([&] {
    const std::string bytes(reinterpret_cast<const char*>(data), size);
    const nlohmann::ordered_json theirs = ar::dist::parse_identity(bytes, 1, mine);
    const std::string why = ar::dist::handshake_mismatch({mine, theirs});
    if (!why.empty() && why.find("rank 1") == std::string::npos) {
      std::fprintf(stderr, "fuzz: FINDING: a mismatch message that does not name rank 1: %s\n", why.c_str());
      std::abort();
    }
  });
}
