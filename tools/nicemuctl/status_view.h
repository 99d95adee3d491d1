// Human-readable rendering of daemon status objects (the JSON of Node::status()): aligned
// sections per node, and the credential table of `cred list`.
#pragma once
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace nicemu::tools {

// One node: identity line, credentials, attached CDMs, counters.
void print_status(std::FILE* out, const nlohmann::json& node);
// Credentials of every node, one row each.
void print_credentials(std::FILE* out, const std::vector<nlohmann::json>& nodes);

std::string format_bytes(uint64_t bytes);     // "512 B", "64.0 KiB", "1.5 MiB"
std::string format_duration(double seconds);  // "42s", "3m12s", "2h03m", "1d04h"

}  // namespace nicemu::tools
