// The node's virtual-MDH blocks: which CDM registered each vMDH index of a protection
// domain (GNI_MEM_USE_VMDH). On the hardware the block belongs to the protection tag on the
// node, shared by every process of the job there (libfabric's gni provider splits its
// indices between the node's ranks), so a peer that knows an index and the node reaches
// the registration without exchanging handles. Written by the control thread, read by the
// BTE engine and the fabric responder. A binding is only a hint: whoever follows it checks
// that the CDM's registration table still holds the index (RegEntry.vmdh), so a binding
// left behind by a dead CDM or a deregistration never grants an access.
#pragma once
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <tuple>

namespace nicemu::daemon {

class VmdhTable {
 public:
  // The memory domain bound to `index` in (ptag, cookie), if any.
  std::optional<uint32_t> domain(uint32_t ptag, uint32_t cookie, uint32_t index) const {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = map_.find(Key{ptag, cookie, index});
    if (it == map_.end()) return std::nullopt;
    return it->second;
  }
  void bind(uint32_t ptag, uint32_t cookie, uint32_t index, uint32_t domain) {
    std::lock_guard<std::mutex> lk(mu_);
    map_[Key{ptag, cookie, index}] = domain;
  }
  // Drops the binding if it still names `domain`.
  void unbind(uint32_t ptag, uint32_t cookie, uint32_t index, uint32_t domain) {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = map_.find(Key{ptag, cookie, index});
    if (it != map_.end() && it->second == domain) map_.erase(it);
  }
  // Every binding to `domain` (its CDM went away).
  void unbind_domain(uint32_t domain) {
    std::lock_guard<std::mutex> lk(mu_);
    std::erase_if(map_, [domain](const auto& kv) { return kv.second == domain; });
  }

 private:
  struct Key {
    uint32_t ptag, cookie, index;
    bool operator<(const Key& o) const { return std::tie(ptag, cookie, index) < std::tie(o.ptag, o.cookie, o.index); }
  };
  mutable std::mutex mu_;
  std::map<Key, uint32_t> map_;
};

}  // namespace nicemu::daemon
