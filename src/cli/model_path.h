// --model as auto-round users write it: a local directory, or a Hugging Face hub name ("org/name")
// looked up in the local cache ($HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub:
// models--org--name/snapshots/<revision>, the revision named by refs/main when present). Nothing is
// downloaded; a name that is in neither place is one error saying how to get a local directory.
#pragma once
#include <string>

namespace ar::cli {

std::string resolve_model_dir(const std::string& arg, const std::string& flag = "--model");

}  // namespace ar::cli
