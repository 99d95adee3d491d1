// Control requests about MSGQ: joining the domain's segment (cdm/msgq_segment.h), its
// connections, lookups by senders of this host, and sends to other hosts (remote/msgq_relay.h).
#include "nicemu/daemon/control/request.h"

#include <spdlog/spdlog.h>

#include "nicemu/abi/cq_entry.h"
#include "nicemu/abi/gni_values.h"

namespace nicemu::daemon {

using namespace nicemu::abi;

void Node::handle_msgq(Request& q) {
  auto bad = [&] {
    ++ctr_.malformed_messages;
    init_reply<PlainReply>(q.reply, q.h).r.rc = rc::kInvalidParam;
  };
  // Every request but a lookup comes on an attach connection, for the CDM's own domain.
  CdmRegion* cdm = owned_cdm(q.peer);
  MsgqSegment* seg = nullptr;
  if (cdm)
    if (auto it = msgqs_.find(cdm->credential()); it != msgqs_.end()) seg = it->second.get();
  const bool member = seg && seg->is_member(cdm->attach_id());
  switch (static_cast<Op>(q.h.op)) {
    case Op::kMsgqJoin: {
      ctl::MsgqJoin req;
      if (!parse(q, req)) return bad();
      auto& r = init_reply<ctl::MsgqJoinReply>(q.reply, q.h);
      auto refuse = [&](int code, const char* why) {
        ++ctr_.msgq_join_refused;
        spdlog::warn("nic {}: MSGQ join of inst {} (pid {}) refused: {}", cfg_.nic_addr, cdm ? cdm->inst_id() : 0,
                     q.peer.pid, why);
        r.r.rc = code;
      };
      if (!cdm) return refuse(rc::kInvalidState, "not attached");
      if (!msgq::attrs_valid(req.attrs)) return refuse(rc::kInvalidParam, "invalid attributes");
      if (seg && !(seg->attrs() == req.attrs))
        return refuse(rc::kInvalidState, "attributes differ from those of the node's queue");
      if (!seg) {
        try {
          auto created = std::make_unique<MsgqSegment>(cfg_.nic_addr, cdm->credential(), req.attrs, next_msgq_++);
          seg = created.get();
          msgqs_[cdm->credential()] = std::move(created);
        } catch (const std::exception& e) {
          return refuse(rc::kErrorNomem, e.what());
        }
      }
      r.r.rc = seg->join(cdm->attach_id(), cdm->pid(), cdm->inst_id(), r.member, r.member_gen);
      if (r.r.rc != rc::kSuccess) {
        refuse(r.r.rc, "already joined, or nloc_insts instances joined already");
        if (seg->live_members() == 0) msgqs_.erase(cdm->credential());
        return;
      }
      ++ctr_.msgq_joins;
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
      msgq_leave(*cdm);
      r.r.rc = rc::kSuccess;
      return;
    }
    case Op::kMsgqRemoteSend: {  // one-way: a refusal is counted, the sender not told
      abi::remote::MsgqRemoteSend req;
      if (q.len != sizeof req || !member) {
        ++ctr_.malformed_messages;
        return;
      }
      std::memcpy(&req, q.msg, sizeof req);
      if (port_.reach(req.dst_pe) == abi::cqe::kErrNoPeer || !msgq_relay_.forward(*cdm, *seg, req))
        ++ctr_.malformed_messages;
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
      ++ctr_.msgq_lookups;
      Credential c{req.ptag, req.cookie};
      auto it = msgqs_.find(c);
      if (req.nic_addr != cfg_.nic_addr) {
        r.r.rc = rc::kNoMatch;
      } else if (!may_use(q.peer, c)) {
        r.r.rc = refuse_credential(q.peer, "MSGQ lookup", c);
      } else if (it == msgqs_.end()) {
        r.r.rc = rc::kNoMatch;
      } else {
        r.r.rc = rc::kSuccess;
        r.segment_id = it->second->id();
        r.size = it->second->size();
        q.pass_fds = {it->second->ro_memfd(), it->second->rw_memfd(), -1};
      }
      return;
    }
    default:
      return bad();
  }
}

void Node::msgq_leave(const CdmRegion& cdm) {
  auto it = msgqs_.find(cdm.credential());
  if (it == msgqs_.end() || it->second->leave(cdm.attach_id()) != rc::kSuccess) return;
  if (it->second->live_members() == 0) {
    // Remote senders keep their mappings: they see the segment dead and stop.
    it->second->kill(msgq::kSegmentDead);
    spdlog::info("nic {}: MSGQ segment of ptag {} reclaimed (last member gone)", cfg_.nic_addr,
                 it->first.ptag);
    msgqs_.erase(it);
  }
}

}  // namespace nicemu::daemon
