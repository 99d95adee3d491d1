// PMI_process_mapping parsing and formatting; see process_mapping.h.
#include "process_mapping.h"

#include <cctype>
#include <charconv>
#include <limits>

namespace nicemu::pmi::wire {

namespace {

// A tiny cursor over the mapping text that skips blanks between tokens.
class Cursor {
 public:
  explicit Cursor(std::string_view s) : s_(s) {}
  bool eat(char c) {
    skip();
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  bool eat_word(std::string_view w) {
    skip();
    if (s_.substr(i_, w.size()) != w) return false;
    i_ += w.size();
    return true;
  }
  std::optional<int> number() {
    skip();
    int v = 0;
    auto [p, ec] = std::from_chars(s_.data() + i_, s_.data() + s_.size(), v);
    if (ec != std::errc() || v < 0) return std::nullopt;
    i_ = static_cast<size_t>(p - s_.data());
    return v;
  }
  bool at_end() {
    skip();
    return i_ == s_.size();
  }

 private:
  void skip() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  std::string_view s_;
  size_t i_ = 0;
};

}  // namespace

std::optional<std::vector<MappingBlock>> parse_process_mapping(std::string_view text) {
  Cursor c(text);
  if (!c.eat('(') || !c.eat_word("vector")) return std::nullopt;
  std::vector<MappingBlock> blocks;
  while (c.eat(',')) {
    MappingBlock b;
    std::optional<int> start, nodes, per;
    if (!c.eat('(') || !(start = c.number()) || !c.eat(',') || !(nodes = c.number()) ||
        !c.eat(',') || !(per = c.number()) || !c.eat(')'))
      return std::nullopt;
    b.start_node = *start;
    b.nodes = *nodes;
    b.ranks_per_node = *per;
    blocks.push_back(b);
  }
  if (!c.eat(')') || !c.at_end()) return std::nullopt;
  return blocks;
}

std::optional<std::vector<int>> map_ranks_to_nodes(const std::vector<MappingBlock>& blocks,
                                                   int size) {
  if (size < 0) return std::nullopt;
  long long per_pass = 0;
  for (const MappingBlock& b : blocks)
    per_pass += static_cast<long long>(b.nodes) * b.ranks_per_node;
  if (per_pass == 0) return size == 0 ? std::optional<std::vector<int>>(std::vector<int>{})
                                       : std::nullopt;
  std::vector<int> out;
  out.reserve(static_cast<size_t>(size));
  auto full = [&] { return static_cast<int>(out.size()) == size; };
  while (!full()) {
    for (const MappingBlock& b : blocks) {
      if (b.ranks_per_node == 0) continue;
      for (int n = 0; n < b.nodes && !full(); ++n) {
        long long node = static_cast<long long>(b.start_node) + n;
        if (node > std::numeric_limits<int>::max()) return std::nullopt;
        for (int k = 0; k < b.ranks_per_node && !full(); ++k)
          out.push_back(static_cast<int>(node));
      }
      if (full()) break;
    }
  }
  return out;
}

std::string format_process_mapping(const std::vector<int>& node_of_rank) {
  // Runs of consecutive ranks on one node, then runs of those runs on consecutive nodes
  // with equal counts.
  struct Run {
    int node;
    int count;
  };
  std::vector<Run> runs;
  for (int node : node_of_rank) {
    if (!runs.empty() && runs.back().node == node)
      ++runs.back().count;
    else
      runs.push_back({node, 1});
  }
  std::vector<MappingBlock> blocks;
  for (const Run& r : runs) {
    if (!blocks.empty()) {
      MappingBlock& b = blocks.back();
      if (b.ranks_per_node == r.count && b.start_node + b.nodes == r.node) {
        ++b.nodes;
        continue;
      }
    }
    blocks.push_back({r.node, 1, r.count});
  }
  std::string s = "(vector";
  for (const MappingBlock& b : blocks)
    s += ",(" + std::to_string(b.start_node) + "," + std::to_string(b.nodes) + "," +
         std::to_string(b.ranks_per_node) + ")";
  s += ")";
  return s;
}

}  // namespace nicemu::pmi::wire
