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
constexpr IntLimit kSeed{"--seed", 0, INT64_MAX};
constexpr IntLimit kTokens{"-n", 0, 1 << 24};             // generate
constexpr IntLimit kCtx{"--ctx", 0, 1 << 24};             // eval; 0: default, else >= 2
constexpr IntLimit kEvalBatch{"--batch", 1, 65536};       // eval
constexpr IntLimit kDatasetNum{":num=", 1, 1 << 20};      // --dataset sub-option
}  // namespace limits

// "" when v is within the limit, else "<option> <v> is out of range (<lo> to <hi>)".
std::string check_limit(const IntLimit& l, int64_t v);
// "" when v is finite and >= 0, else "<option> <v> must be a finite number >= 0".
std::string check_rate(const char* option, double v);

// Every numeric field of the options against the table above (first failure: InvalidInput).
void validate_quantize_options(const QuantizeOptions& opt);

}  // namespace ar
