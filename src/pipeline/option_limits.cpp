#include "pipeline/option_limits.h"

#include <charconv>
#include <cmath>
#include <sstream>

#include "core/error.h"
#include "pipeline/quantize.h"

namespace ar {

std::string check_limit(const IntLimit& l, int64_t v) {
  if (v >= l.lo && v <= l.hi) return "";
  return std::string(l.option) + " " + std::to_string(v) + " is out of range (" + std::to_string(l.lo) + " to " +
         std::to_string(l.hi) + ")";
}

std::string check_rate(const char* option, double v) {
  if (v >= 0 && v <= kMaxRate) return "";  // false for NaN
  std::ostringstream s;
  s << option << " " << v << " is out of range (0 to " << kMaxRate << ")";
  return s.str();
}

std::string check_seed_text(const std::string& v) {
  uint64_t seed = 0;
  const char* end = v.data() + v.size();
  const auto [at, ec] = std::from_chars(v.data(), end, seed);
  if (!v.empty() && v[0] != '-' && v[0] != '+' && at == end && ec == std::errc()) return "";
  const bool digits = !v.empty() && v.find_first_not_of("0123456789", v[0] == '-' ? 1 : 0) == std::string::npos;
  return (v.empty() ? "''" : v) + (digits ? " is out of range (0 to 2^64-1)" : " is not an integer (0 to 2^64-1)");
}

void validate_quantize_options(const QuantizeOptions& o) {
  using namespace limits;
  std::string why;
  auto first = [&](const std::string& m) {
    if (why.empty()) why = m;
  };
  first(check_limit(kThreads, o.threads));
  first(check_limit(kIters, o.tune.iters));
  first(check_limit(kBatchSize, o.tune.batch_size));
  first(check_limit(kGradAccum, o.tune.gradient_accumulate_steps));
  first(check_limit(kNsamples, o.calib.nsamples));
  first(check_limit(kSeqlen, o.calib.seqlen));
  first(check_limit(kGroupSize, o.fmt.group_size));
  if (o.fmt.group_size == 0 && !o.fmt.is_float())  // FP8 per tensor (FPW8A16) has group 0
    first("--group_size 0 is not supported (-1 or > 0)");
  first(check_rate("--lr", o.tune.lr));
  first(check_rate("--minmax_lr", o.tune.minmax_lr));
  if (!why.empty()) fail(ErrorKind::InvalidInput, why);
}

}  // namespace ar
