// The valid range of every numeric run option, in one table shared by the CLI (checked at parse time,
// a usage error) and the library entry points (quantize_model, Context: InvalidInput), so that no
// caller can start a run that spins (batch size 0), tunes nothing (negative iterations) or exhausts
// the host (100000 threads). Messages name the option and the bound.
#pragma once
#include <cstdint>
#include <string>

namespace ar {

struct QuantizeOptions;

struct IntLimit {
  const char* option;
  int64_t lo, hi;
};

namespace limits {
constexpr IntLimit kThreads{"--threads", 0, 1024};  // 0: all cores; same cap as core/context.h
constexpr IntLimit kIters{"--iters", 0, 1000000};
constexpr IntLimit kBatchSize{"--batch_size", 1, 65536};
constexpr IntLimit kGradAccum{"--gradient_accumulate_steps", 1, 65536};
constexpr IntLimit kNsamples{"--nsamples", 1, 1 << 20};
constexpr IntLimit kSeqlen{"--seqlen", 2, 1 << 24};
constexpr IntLimit kGroupSize{"--group_size", -1, 1 << 24};  // -1: per channel; 0 refused separately
constexpr IntLimit kTokens{"-n", 0, 1 << 24};             // generate
constexpr IntLimit kCtx{"--ctx", 0, 1 << 24};             // eval; 0: default, else >= 2
constexpr IntLimit kEvalBatch{"--batch", 1, 65536};       // eval
constexpr IntLimit kDatasetNum{":num=", 1, 1 << 20};      // --dataset sub-option
}  // namespace limits

// "" when v is within the limit, else "<option> <v> is out of range (<lo> to <hi>)".
std::string check_limit(const IntLimit& l, int64_t v);
// Learning rates: a step of kMaxRate already moves every tunable (V, the min/max and scale
// coefficients, each within a range of width 1) across its range, and the tuner's fp32 step must stay
// finite (1e308 would be inf there, and a non-finite loss after the first block's work).
inline constexpr double kMaxRate = 1e6;
// "" when 0 <= v <= kMaxRate, else "<option> <v> is out of range (0 to 1e+06)".
std::string check_rate(const char* option, double v);
// A --seed text: "" when it is a decimal integer from 0 to 2^64-1, else why not ("<v> is out of range
// (0 to 2^64-1)"; the CLI names the option in front).
std::string check_seed_text(const std::string& v);

// Every numeric field of the options against the table above (first failure: InvalidInput).
void validate_quantize_options(const QuantizeOptions& opt);

}  // namespace ar
