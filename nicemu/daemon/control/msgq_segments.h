// The node's MSGQ segments (cdm/msgq_segment.h): one per protection domain with members
// here, created by the first join and reclaimed when the last member leaves.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>

#include <nlohmann/json_fwd.hpp>

#include "nicemu/daemon/cdm/cdm_region.h"
#include "nicemu/daemon/cdm/msgq_segment.h"

namespace nicemu::daemon {

class MsgqSegments {
 public:
  explicit MsgqSegments(uint32_t nic_addr) : nic_addr_(nic_addr) {}

  // The segment of domain `c` (nullptr if none).
  MsgqSegment* find(const Credential& c) const;
  void for_each(const std::function<void(MsgqSegment&)>& f);
  // A new segment of domain `c` (throws if it cannot be made).
  MsgqSegment& create(const Credential& c, const abi::msgq::Attrs& attrs);
  void erase(const Credential& c) { segs_.erase(c); }
  // The CDM leaves its domain's segment (if it joined); the last member reclaims it.
  void leave(const CdmRegion& cdm);
  // Every segment goes NIC-down (the daemon stops), then is dropped.
  void kill_all();
  nlohmann::json status() const;

 private:
  uint32_t nic_addr_;
  std::map<Credential, std::unique_ptr<MsgqSegment>> segs_;
  uint64_t next_id_ = 1;
};

}  // namespace nicemu::daemon
