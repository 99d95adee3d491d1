// The MSGQ segment of one protection domain on this node (layout and contracts in
// nicemu/abi/msgq_layout.h): the memfd, the read-only tables the daemon alone writes
// (members, receive and send connections), and ring initialisation. The data path (rings)
// is run by the clients; the daemon only creates, bookkeeps and reclaims.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <optional>

#include <nlohmann/json_fwd.hpp>

#include "nicemu/abi/msgq_layout.h"
#include "nicemu/daemon/cdm/cdm_region.h"

namespace nicemu::daemon {

class MsgqSegment {
 public:
  // Creates, sizes, seals and maps the memfd; fills in the header. Throws on failure.
  MsgqSegment(uint32_t nic_addr, Credential cred, const abi::msgq::Attrs& attrs, uint64_t segment_id);
  ~MsgqSegment();
  MsgqSegment(const MsgqSegment&) = delete;
  MsgqSegment& operator=(const MsgqSegment&) = delete;

  // The two memfds (abi/region_map.h): daemon-written tables (sealed), then the rings.
  int ro_memfd() const { return ro_fd_; }
  int rw_memfd() const { return rw_fd_; }
  uint64_t id() const { return id_; }
  uint64_t size() const { return view_.lay.total_size; }
  const abi::msgq::Attrs& attrs() const { return view_.attrs; }
  Credential credential() const { return cred_; }
  const abi::msgq::SegmentView& view() const { return view_; }

  // Each returns a gni_return_t value.
  int join(uint64_t attach_id, pid_t pid, uint32_t inst_id, uint32_t& member, uint32_t& gen);
  int leave(uint64_t attach_id);
  int conn_open(uint32_t remote_pe, uint32_t& conn, uint32_t& gen);
  int connect(uint32_t remote_pe, uint32_t remote_insts, uint32_t& conn, uint32_t& gen);
  // Drops both sides of the connection with remote_pe; NO_MATCH if neither exists.
  int conn_release(uint32_t remote_pe);

  bool is_member(uint64_t attach_id) const { return find_member(attach_id) >= 0; }
  // A member here connected to send to `pe` (GNI_MsgqConnect)?
  bool connected_to(uint32_t pe) const { return tx_credit(pe) != nullptr; }
  // The credits of the send connection to `pe` (another host's node); null if not connected.
  abi::msgq::TxCredit* tx_credit(uint32_t pe) const;
  // Where deliver_remote put a message: ring (RxConn index and generation) and position.
  struct RingPos {
    uint32_t ring = 0, gen = 0;
    uint64_t pos = 0;
  };
  // A message from instance `src_inst` of node `src_pe` (another host's) for instance
  // `dst_inst` here, put into the ring this node opened for `src_pe` as a sender there would.
  // kSuccess; kNotDone: the ring is full (retry later); kInvalidState: no ring for that node,
  // no such destination, or the segment is dead (nobody can ever take it).
  int deliver_remote(uint32_t src_pe, uint32_t src_inst, uint32_t dst_inst, uint8_t tag, const void* hdr,
                     uint32_t hdr_len, const void* msg, uint32_t msg_len, RingPos* at = nullptr);
  // Recycles what receivers took from ring `ring` (if it still is generation `gen`) and
  // returns its head: every position below it is free again. Nothing if the ring is gone.
  std::optional<uint64_t> ring_head(uint32_t ring, uint32_t gen) const;
  uint32_t live_members() const;
  // Marks the segment dead (last member gone) or NIC down and wakes every sleeper.
  void kill(abi::msgq::SegmentState why);
  nlohmann::json status() const;

 private:
  int find_member(uint64_t attach_id) const;

  int ro_fd_ = -1;
  int rw_fd_ = -1;
  abi::msgq::SegmentView view_;
  uint64_t id_ = 0;
  Credential cred_;
};

}  // namespace nicemu::daemon
