// Renderings of counter-page snapshots: `nicemuctl stats` as text, JSON, or the Prometheus
// text exposition format (for a node exporter's textfile collector), and the frames of
// `nicemuctl top`.
#pragma once
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "counter_pages.h"

namespace nicemu::tools {

// `all`: also the counters that are zero (node counters are always shown).
void print_counters(std::FILE* out, const NodeSnapshot& s, bool all);
nlohmann::json counters_json(const std::vector<NodeSnapshot>& nodes);
// Exposition format 0.0.4: one HELP and TYPE per metric family, then its samples.
std::string counters_prometheus(const std::vector<NodeSnapshot>& nodes);

// One frame of `nicemuctl top`: rates between `prev` and `cur` (matched by page and
// attach id), for `interval_s` seconds of wall time between the two reads.
std::string top_frame(const std::vector<NodeSnapshot>& prev, const std::vector<NodeSnapshot>& cur,
                      double interval_s, const std::vector<std::string>& problems);

}  // namespace nicemu::tools
