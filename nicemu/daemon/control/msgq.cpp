// Control requests about MSGQ: joining the domain's segment (cdm/msgq_segment.h), its
// connections, lookups by senders of this host, and sends to other hosts (remote/msgq_relay.h);
// and the node's segments, one per domain (msgq_segments.h).
#include "nicemu/daemon/control/msgq_segments.h"

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "nicemu/abi/cq_entry.h"
#include "nicemu/abi/gni_values.h"
#include "nicemu/abi/remote_ops.h"
#include "nicemu/daemon/control/cdm_table.h"
#include "nicemu/daemon/control/credentials.h"
#include "nicemu/daemon/control/handlers.h"
#include "nicemu/daemon/fabric_port.h"
#include "nicemu/daemon/remote/msgq_relay.h"

namespace nicemu::daemon {

using namespace nicemu::abi;

MsgqSegment* MsgqSegments::find(const Credential& c) const {
  auto it = segs_.find(c);
  return it == segs_.end() ? nullptr : it->second.get();
}

void MsgqSegments::for_each(const std::function<void(MsgqSegment&)>& f) {
  for (auto& [cred, seg] : segs_) f(*seg);
}

MsgqSegment& MsgqSegments::create(const Credential& c, const abi::msgq::Attrs& attrs) {
  auto created = std::make_unique<MsgqSegment>(nic_addr_, c, attrs, next_id_++);
  MsgqSegment& seg = *created;
  segs_[c] = std::move(created);
  return seg;
}

void MsgqSegments::kill_all() {
  for (auto& [c, seg] : segs_) seg->kill(msgq::kSegmentNicDown);
  segs_.clear();
}

nlohmann::json MsgqSegments::status() const {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& [c, seg] : segs_) out.push_back(seg->status());
  return out;
}

void control::msgq(Request& q, const NicInfo& nic, Credentials& creds, CdmTable& cdms, MsgqSegments& segs,
                   FabricPort& port, MsgqRelay& relay, Counters& ctr) {
  auto bad = [&] {
    ++ctr.malformed_messages;
    init_reply<PlainReply>(q.reply, q.h).r.rc = rc::kInvalidParam;
  };
  // Every request but a lookup comes on an attach connection, for the CDM's own domain.
  CdmRegion* cdm = cdms.owned(q.peer);
  MsgqSegment* seg = cdm ? segs.find(cdm->credential()) : nullptr;
  const bool member = seg && seg->is_member(cdm->attach_id());
  switch (static_cast<Op>(q.h.op)) {
    case Op::kMsgqJoin: {
      ctl::MsgqJoin req;
      if (!parse(q, req)) return bad();
      auto& r = init_reply<ctl::MsgqJoinReply>(q.reply, q.h);
      auto refuse = [&](int code, const char* why) {
        ++ctr.msgq_join_refused;
        spdlog::warn("nic {}: MSGQ join of inst {} (pid {}) refused: {}", nic.nic_addr, cdm ? cdm->inst_id() : 0,
                     q.peer.pid, why);
        r.r.rc = code;
      };
      if (!cdm) return refuse(rc::kInvalidState, "not attached");
      if (!msgq::attrs_valid(req.attrs)) return refuse(rc::kInvalidParam, "invalid attributes");
      if (seg && !(seg->attrs() == req.attrs))
        return refuse(rc::kInvalidState, "attributes differ from those of the node's queue");
      if (!seg) {
        try {
          seg = &segs.create(cdm->credential(), req.attrs);
        } catch (const std::exception& e) {
          return refuse(rc::kErrorNomem, e.what());
        }
      }
      r.r.rc = seg->join(cdm->attach_id(), cdm->pid(), cdm->inst_id(), r.member, r.member_gen);
      if (r.r.rc != rc::kSuccess) {
        refuse(r.r.rc, "already joined, or nloc_insts instances joined already");
        if (seg->live_members() == 0) segs.erase(cdm->credential());
        return;
      }
      ++ctr.msgq_joins;
      r.segment_id = seg->id();
      r.size = seg->size();
      q.pass_fds = {seg->ro_memfd(), seg->rw_memfd(), -1};
      return;
    }
    case Op::kMsgqLeave: {
      ctl::MsgqLeave req;
      if (!parse(q, req)) return bad();
      auto& r = init_reply<PlainReply>(q.reply, q.h);
      if (!member) {
        r.r.rc = rc::kInvalidState;
        return;
      }
      segs.leave(*cdm);
      r.r.rc = rc::kSuccess;
      return;
    }
    case Op::kMsgqRemoteSend: {  // one-way: a refusal is counted, the sender not told
      abi::remote::MsgqRemoteSend req;
      if (q.len != sizeof req || !member) {
        ++ctr.malformed_messages;
        return;
      }
      std::memcpy(&req, q.msg, sizeof req);
      if (port.reach(req.dst_pe) == abi::cqe::kErrNoPeer || !relay.forward(*cdm, *seg, req))
        ++ctr.malformed_messages;
      return;
    }
    case Op::kMsgqConnOpen:
    case Op::kMsgqConnect:
    case Op::kMsgqConnRelease: {
      ctl::MsgqConn req;
      if (!parse(q, req)) return bad();
      auto& r = init_reply<ctl::MsgqConnReply>(q.reply, q.h);
      if (!member) {
        r.r.rc = rc::kInvalidState;
        return;
      }
      Op op = static_cast<Op>(q.h.op);
      if (op == Op::kMsgqConnOpen)
        r.r.rc = seg->conn_open(req.remote_pe, r.conn, r.gen);
      else if (op == Op::kMsgqConnect)
        r.r.rc = seg->connect(req.remote_pe, req.remote_insts, r.conn, r.gen);
      else
        r.r.rc = seg->conn_release(req.remote_pe);
      return;
    }
    case Op::kMsgqLookup: {
      ctl::MsgqLookup req;
      if (!parse(q, req)) return bad();
      auto& r = init_reply<ctl::MsgqLookupReply>(q.reply, q.h);
      ++ctr.msgq_lookups;
      Credential c{req.ptag, req.cookie};
      MsgqSegment* found = segs.find(c);
      if (req.nic_addr != nic.nic_addr) {
        r.r.rc = rc::kNoMatch;
      } else if (!creds.may_use(q.peer, c)) {
        r.r.rc = creds.refuse(q.peer, "MSGQ lookup", c);
      } else if (!found) {
        r.r.rc = rc::kNoMatch;
      } else {
        r.r.rc = rc::kSuccess;
        r.segment_id = found->id();
        r.size = found->size();
        q.pass_fds = {found->ro_memfd(), found->rw_memfd(), -1};
      }
      return;
    }
    default:
      return bad();
  }
}

void MsgqSegments::leave(const CdmRegion& cdm) {
  auto it = segs_.find(cdm.credential());
  if (it == segs_.end() || it->second->leave(cdm.attach_id()) != rc::kSuccess) return;
  if (it->second->live_members() == 0) {
    // Remote senders keep their mappings: they see the segment dead and stop.
    it->second->kill(msgq::kSegmentDead);
    spdlog::info("nic {}: MSGQ segment of ptag {} reclaimed (last member gone)", nic_addr_, it->first.ptag);
    segs_.erase(it);
  }
}

}  // namespace nicemu::daemon
