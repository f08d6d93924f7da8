// The handshake before any work: every rank publishes its identity (an object of named fields: build,
// options, model, calibration, ... and "host") through the rendezvous store and compares all of them.
// A field that differs stops every rank with the same error, naming the field, the ranks on each side
// and, for object fields, the first keys that differ.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace ar::dist {

// ids[r]: rank r's identity. "" when every field except "host" is equal everywhere; otherwise the
// error message (deterministic: every rank computes the same one).
std::string handshake_mismatch(const std::vector<nlohmann::ordered_json>& ids);

// An identity received from a peer (bytes from the network): a JSON object of at most 64 KiB whose
// fields are those of `mine`; anything else is an InvalidInput error naming the rank.
nlohmann::ordered_json parse_identity(const std::string& bytes, int rank, const nlohmann::ordered_json& mine);

}  // namespace ar::dist
