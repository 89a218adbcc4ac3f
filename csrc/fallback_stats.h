// Book-keeping of CPU fallbacks (torch-free): a count per operator, whether
// the operator was already warned about, and strict mode (fallbacks are
// errors), which starts from the environment variable SPYRE_STRICT=1.
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace spyre::torch_glue {

// Counts one fallback of `op`; true when it is the first since the last
// reset (the caller warns once per operator).
bool record_fallback(const std::string& op);
std::map<std::string, uint64_t> fallback_counts();
void reset_fallback_counts();

bool strict_mode();
void set_strict_mode(bool strict);

}  // namespace spyre::torch_glue
