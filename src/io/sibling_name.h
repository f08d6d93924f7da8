// Names of the files and directories we create next to an output (`<out>.partial`,
// `<out>.autoround-tmp.XXXXXX`, `<file>.tmp.XXXXXX`). A legal output name may already be NAME_MAX
// (255 bytes) long, and the suffix would then make the temporary's name too long to create.
#pragma once
#include <string>

namespace ar {

// `path` + `suffix` when its last component fits in 255 bytes; otherwise the output's name is cut
// (at a UTF-8 character boundary) and "~" and 16 hex digits of a hash of the whole name are put
// before the suffix, so the result still starts like the output, is different for different
// outputs, fits, and is the same on every call (resume finds its .partial again, the next run finds
// an interrupted run's temporaries). `suffix` must be shorter than 200 bytes and hold no '/'.
std::string sibling_name(const std::string& path, const std::string& suffix);

}  // namespace ar
