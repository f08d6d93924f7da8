// What a multi-process job's ranks must share, as the handshake's identity (distributed/handshake.h):
//   build        version and a checksum of this executable (the same binary everywhere)
//   options      everything that determines the output except paths (run_fingerprint without "calibration")
//   model        per file of the model directory (sorted names): size and a content checksum; files up
//                to 64 MiB are hashed whole, larger ones by their first and last MiB and a 64 KiB stripe
//                every 256 MiB (a safetensors header and every shard boundary are covered; a full hash
//                of a 140 GB checkpoint would cost minutes of disk reads per rank)
//   calibration  the token count and checksum of the calibration ids every rank built
#pragma once
#include <nlohmann/json.hpp>
#include <string>

namespace ar {

nlohmann::ordered_json model_fingerprint(const std::string& model_dir);
std::string build_fingerprint();  // "<version> exe:<hash>"
// {options, model, calibration} above: what a --resume state must match (pipeline/resume_state.h). The
// build is left out, so a rebuilt binary may continue a run; the model enters by content, not by path.
nlohmann::ordered_json run_identity(const nlohmann::ordered_json& run_fingerprint, const std::string& model_dir);
// run_identity with the build first: what every rank of a job must share.
nlohmann::ordered_json job_identity(const nlohmann::ordered_json& run_identity);

}  // namespace ar
