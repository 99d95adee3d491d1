// The job's rank-to-node layout; see layout.h.
#include "layout.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>

#include "client.h"
#include "process_mapping.h"

namespace nicemu::pmi {

bool parse_int_list(const std::string& s, long min, std::vector<int>& out) {
  out.clear();
  size_t i = 0;
  while (i <= s.size()) {
    size_t end = s.find(',', i);
    if (end == std::string::npos) end = s.size();
    std::string item = s.substr(i, end - i);
    char* stop = nullptr;
    errno = 0;
    long v = std::strtol(item.c_str(), &stop, 10);
    if (item.empty() || *stop != '\0' || errno != 0 || v < min || v > 2147483647L) return false;
    out.push_back(static_cast<int>(v));
    i = end + 1;
  }
  return true;
}

int node_nic_addr(const Layout& l, int nid) {
  if (!l.nic_addrs.empty())
    return nid >= 0 && static_cast<size_t>(nid) < l.nic_addrs.size() ? l.nic_addrs[nid] : nid;
  static std::map<int, int> found;  // published addresses do not change
  Client& c = Client::get();
  std::lock_guard lock(c.mutex());
  if (auto it = found.find(nid); it != found.end()) return it->second;
  auto first = std::find(l.nid_of_rank.begin(), l.nid_of_rank.end(), nid);
  if (first == l.nid_of_rank.end()) return nid;
  std::string value;
  if (c.kvs_get(c.kvsname(), kNicAddrKeyPrefix + std::to_string(first - l.nid_of_rank.begin()), value) !=
      PMI_SUCCESS)
    return nid;  // not published, or not yet visible: not cached
  std::vector<int> addrs;
  if (!parse_int_list(value, 0, addrs) || addrs.size() != 1) return nid;
  found[nid] = addrs[0];
  return addrs[0];
}

const Layout* get_layout(int* rc) {
  static Layout* cached = nullptr;  // never freed: Get_nidlist_ptr hands out its array
  Client& c = Client::get();
  std::lock_guard lock(c.mutex());
  if (cached) {
    *rc = PMI_SUCCESS;
    return cached;
  }
  if ((*rc = c.check_init()) != PMI_SUCCESS) return nullptr;

  auto layout = std::make_unique<Layout>();
  std::string text;
  int grc = c.kvs_get(c.kvsname(), "PMI_process_mapping", text);
  if (grc != PMI_SUCCESS && grc != PMI_ERR_INVALID_KEY) {
    *rc = grc;
    return nullptr;
  }
  std::optional<std::vector<int>> nids;
  if (grc == PMI_SUCCESS) {
    if (auto blocks = wire::parse_process_mapping(text))
      nids = wire::map_ranks_to_nodes(*blocks, c.size());
    if (!nids) c.report("ignoring malformed PMI_process_mapping \"" + text + "\"");
  }
  layout->nid_of_rank = nids ? std::move(*nids) : std::vector<int>(c.size(), 0);

  std::string addrs;
  grc = c.kvs_get(c.kvsname(), "nicemu_nic_addrs", addrs);
  if (grc != PMI_SUCCESS && grc != PMI_ERR_INVALID_KEY) {
    *rc = grc;
    return nullptr;
  }
  if (grc == PMI_SUCCESS) {
    // "4978,4979,..."; empty on any malformed entry.
    if (!parse_int_list(addrs, 0, layout->nic_addrs)) layout->nic_addrs.clear();
    if (layout->nic_addrs.empty()) c.report("ignoring malformed nicemu_nic_addrs \"" + addrs + "\"");
  }

  layout->my_nid = layout->nid_of_rank[c.rank()];
  int max_nid = *std::max_element(layout->nid_of_rank.begin(), layout->nid_of_rank.end());
  layout->num_nodes = std::max<int>(max_nid + 1, static_cast<int>(layout->nic_addrs.size()));
  for (int r = 0; r < c.size(); ++r)
    if (layout->nid_of_rank[r] == layout->my_nid) layout->local_ranks.push_back(r);

  cached = layout.release();
  *rc = PMI_SUCCESS;
  return cached;
}

}  // namespace nicemu::pmi
