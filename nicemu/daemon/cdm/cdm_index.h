// The node's attached CDMs by what per-request lookups ask for (issue 24): by (credential,
// inst_id) for peer lookups and attach's uniqueness check, by process and by credential for
// a process's family and the resource-limit sums. A request then looks at the CDMs it
// concerns, not at every CDM of the node (hundreds in a large job on one host).
#pragma once
#include <sys/types.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <tuple>
#include <vector>

#include "nicemu/daemon/cdm/cdm_region.h"

namespace nicemu::daemon {

class CdmIndex {
 public:
  void add(uint64_t attach_id, pid_t pid, const Credential& c, uint32_t inst) {
    by_inst_[{c.ptag, c.cookie, inst}].push_back(attach_id);
    by_pid_[pid].push_back(attach_id);
    by_cred_[c].push_back(attach_id);
  }
  void remove(uint64_t attach_id, pid_t pid, const Credential& c, uint32_t inst) {
    drop(by_inst_, std::tuple{c.ptag, c.cookie, inst}, attach_id);
    drop(by_pid_, pid, attach_id);
    drop(by_cred_, c, attach_id);
  }
  void clear() {
    by_inst_.clear();
    by_pid_.clear();
    by_cred_.clear();
  }
  // Attach ids, oldest first (several only while a dead CDM is still held).
  const std::vector<uint64_t>& with_inst(const Credential& c, uint32_t inst) const {
    return get(by_inst_, std::tuple{c.ptag, c.cookie, inst});
  }
  const std::vector<uint64_t>& of_process(pid_t pid) const { return get(by_pid_, pid); }
  const std::vector<uint64_t>& of_credential(const Credential& c) const { return get(by_cred_, c); }

 private:
  using InstKey = std::tuple<uint32_t, uint32_t, uint32_t>;
  template <typename Map, typename Key>
  static void drop(Map& m, const Key& k, uint64_t id) {
    auto it = m.find(k);
    if (it == m.end()) return;
    std::erase(it->second, id);
    if (it->second.empty()) m.erase(it);
  }
  template <typename Map, typename Key>
  static const std::vector<uint64_t>& get(const Map& m, const Key& k) {
    static const std::vector<uint64_t> none;
    auto it = m.find(k);
    return it == m.end() ? none : it->second;
  }
  std::map<InstKey, std::vector<uint64_t>> by_inst_;
  std::map<pid_t, std::vector<uint64_t>> by_pid_;
  std::map<Credential, std::vector<uint64_t>> by_cred_;
};

}  // namespace nicemu::daemon
