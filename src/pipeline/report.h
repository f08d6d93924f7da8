// The --report JSON: options, notes, per-block losses, phase timings, worlds, exchange bytes, memory.
#pragma once
#include "pipeline/quantize.h"

namespace ar {

// Writes the report to `path` (canonical, checked by check_output_file before the run).
void write_report(const QuantizeOptions& opt, const QuantizeReport& rep, const std::string& path);
// Whether `path` holds a report we wrote (its "generator" field), so --overwrite may replace it.
bool is_report_file(const std::string& path);

}  // namespace ar
