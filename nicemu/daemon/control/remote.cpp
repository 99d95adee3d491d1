// Control requests that start work on other hosts: memory operations (remote/remote_requester.h)
// and SMSG relays (remote/smsg_relay.h).
#include <utility>

#include <spdlog/spdlog.h>

#include "nicemu/abi/remote_ops.h"
#include "nicemu/daemon/bte/bte_engine.h"
#include "nicemu/daemon/bte/bte_regions.h"
#include "nicemu/daemon/control/cdm_table.h"
#include "nicemu/daemon/control/handlers.h"
#include "nicemu/daemon/remote/remote_requester.h"
#include "nicemu/daemon/remote/smsg_relay.h"
#include "nicemu/daemon/remote/ofi_directory.h"
#include "nicemu/daemon/cdm/cdm_region.h"
#include "nicemu/daemon/fabric_port.h"

namespace nicemu::daemon {

using namespace nicemu::abi;

// A post of one of our CDMs for a node of another host, or for a process of this host that
// it may not reach by cross-memory attach (one-way: its outcome is CQ events).
// Every post counts, taken or malformed, once handed on: a relayed SMSG message the CDM sent
// after it waits in its ring until then (ctl::SmsgRelaySend::posts_before).
void control::remote_post(Request& q, CdmTable& cdms, BteEngine& bte, RemoteRequester& out, SmsgRelay& smsg,
                          Counters& ctr) {
  CdmRegion* cdm = cdms.owned(q.peer);
  take_remote_post(q, cdm, bte, out, ctr);
  if (cdm) {
    cdm->took_remote_post();
    smsg.posts_taken(*cdm);
  }
}

void control::take_remote_post(Request& q, CdmRegion* cdm, BteEngine& bte, RemoteRequester& out, Counters& ctr) {
  abi::remote::RemotePost p;
  if (!cdm || q.len < sizeof p) {
    ++ctr.malformed_messages;
    return;
  }
  std::memcpy(&p, q.msg, sizeof p);
  if (p.inline_length != q.len - sizeof p || p.inline_length > abi::remote::kInlineMax) {
    ++ctr.malformed_messages;
    return;
  }
  auto region = bte.regions().local(cdm->attach_id());
  if (!region) {
    ++ctr.malformed_messages;
    return;
  }
  const auto* data = reinterpret_cast<const uint8_t*>(q.msg) + sizeof p;
  if (p.flags & abi::remote::kFlagSameHost) {
    // Said once: which client first needed the daemon's privilege, and why.
    static bool said = false;
    if (!std::exchange(said, true))
      spdlog::info("cross-memory attach is refused between pid {} and a peer on this host (another user, Yama "
                   "ptrace_scope, seccomp): its FMA and AMOs run here, with the daemon's privilege (xmem_proxy_ops)",
                   region->pid());
    return bte.proxy(region, p, data);
  }
  out.post(region, p, data);
}

void control::smsg_relay_open(Request& q, CdmTable& cdms, SmsgRelay& smsg, Counters& ctr) {
  with_cdm<ctl::SmsgRelayOpen, ctl::SmsgRelayOpenReply>(
      q, ctr, cdms.owned(q.peer),
      [&](CdmRegion& cdm, const ctl::SmsgRelayOpen& req, ctl::SmsgRelayOpenReply& r) { return smsg.open(cdm, req, r); });
}

void control::smsg_relay_note(Request& q, CdmTable& cdms, SmsgRelay& smsg, Counters& ctr) {
  ctl::SmsgRelayNote req;
  CdmRegion* cdm = cdms.owned(q.peer);
  if (!parse(q, req) || !cdm) return bad(q, ctr);
  if (static_cast<Op>(q.h.op) == Op::kSmsgRelayDoorbell)
    smsg.doorbell(*cdm);
  else
    smsg.released(*cdm);
}

// The ofi fabric: only an attached CDM publishes (its own address) or looks up (in its own
// credential: the target's daemon checks it).
void control::ofi(Request& q, CdmTable& cdms, FabricPort& port, OfiDirectory& dir, Counters& ctr) {
  CdmRegion* cdm = cdms.owned(q.peer);
  if (q.h.op == static_cast<uint16_t>(ctl::Op::kOfiPublish)) {
    ctl::OfiPublish req;
    if (!parse(q, req)) return bad(q, ctr);
    auto& r = init_reply<PlainReply>(q.reply, q.h);
    if (!cdm) r.r.rc = rc::kInvalidState;
    else r.r.rc = dir.publish(cdm->attach_id(), req.addr, req.addr_len) ? rc::kSuccess : rc::kInvalidParam;
    return;
  }
  ctl::OfiLookup req;
  if (!parse(q, req)) return bad(q, ctr);
  if (!cdm) {
    init_reply<ctl::OfiLookupReply>(q.reply, q.h).r.rc = rc::kInvalidState;
    return;
  }
  const Credential c = cdm->credential();
  dir.lookup(q.h, req, c.ptag, c.cookie, q.peer.reply_later, q.reply, port.remote(req.node));
}

}  // namespace nicemu::daemon
