#include "io/sibling_name.h"

#include <cstdio>

#include "core/error.h"
#include "core/hash.h"

namespace ar {

namespace {
constexpr size_t kNameMax = 255;  // NAME_MAX of Linux filesystems (ext4, xfs, btrfs, tmpfs)
}  // namespace

std::string sibling_name(const std::string& path, const std::string& suffix) {
  AR_CHECK(suffix.size() < 200 && suffix.find('/') == std::string::npos, "bad temporary suffix");
  const size_t slash = path.rfind('/');
  const size_t name_at = slash == std::string::npos ? 0 : slash + 1;
  const std::string name = path.substr(name_at);
  if (name.size() + suffix.size() <= kNameMax) return path + suffix;
  Hash64 h;
  h.update(name.data(), name.size());
  char tag[18];
  std::snprintf(tag, sizeof tag, "~%016llx", static_cast<unsigned long long>(h.digest()));
  size_t keep = kNameMax - suffix.size() - (sizeof tag - 1);
  while (keep > 0 && (static_cast<unsigned char>(name[keep]) & 0xC0) == 0x80) --keep;  // no split character
  return path.substr(0, name_at) + name.substr(0, keep) + tag + suffix;
}

}  // namespace ar
