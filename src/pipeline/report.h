// The --report JSON: options, notes, per-block losses, phase timings, worlds, exchange bytes, memory.
#pragma once
#include "pipeline/quantize.h"

namespace ar {

void write_report(const QuantizeOptions& opt, const QuantizeReport& rep);

}  // namespace ar
