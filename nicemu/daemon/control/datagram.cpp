// Control requests about datagrams: a CDM's posts, and matching messages of this host's
// other daemons (remote/datagram_matcher.h).
#include "nicemu/abi/daemon_protocol.h"
#include "nicemu/daemon/control/cdm_table.h"
#include "nicemu/daemon/control/handlers.h"
#include "nicemu/daemon/control/quotas.h"
#include "nicemu/daemon/remote/datagram_matcher.h"

#include <unistd.h>

#include <algorithm>

namespace nicemu::daemon {

using namespace nicemu::abi;

void control::dgram_open(Request& q, CdmTable& cdms, const Quotas& quotas, Counters& ctr) {
  with_cdm<ctl::DgramOpen, ctl::DgramOpenReply>(
      q, ctr, cdms.owned(q.peer), [&](CdmRegion& cdm, const ctl::DgramOpen&, ctl::DgramOpenReply& r) {
        uint64_t off = 0;
        const int code = cdm.dgram_ring(off);
        if (code == rc::kSuccess) {
          r.ctl_offset = off;
          r.capacity = kDgramRingCapacity;
          // The library refuses a post over the per-process limit itself (posts are one-way).
          r.post_limit = static_cast<uint32_t>(
              std::min<uint64_t>(quotas.limits().per_process[size_t(Resource::kDatagrams)], UINT32_MAX));
        }
        return code;
      });
}

void control::dgram_cancel(Request& q, CdmTable& cdms, DatagramMatcher& dgrams, Counters& ctr) {
  with_cdm<ctl::DgramCancel, PlainReply>(q, ctr, cdms.owned(q.peer),
                                         [&](CdmRegion& cdm, const ctl::DgramCancel& req, PlainReply&) {
                                           const int code = dgrams.cancel(cdm, req);
                                           if (code == rc::kSuccess) ++ctr.datagrams_cancelled;
                                           return code;
                                         });
}

// The one-way datagram messages: they get no reply, a malformed one only counts.
void control::datagram(Request& q, CdmTable& cdms, DatagramMatcher& dgrams, Quotas& quotas, Counters& ctr) {
  auto bad = [&] { ++ctr.malformed_messages; };
  // Messages between daemons: from a daemon of this host (root or the daemon's own user).
  const bool from_daemon = q.peer.uid == 0 || q.peer.uid == geteuid();
  switch (static_cast<Op>(q.h.op)) {
    case Op::kDgramSubmit: {  // one-way: refusals go to the ring as TERMINATED
      ctl::DgramSubmit req;
      if (!parse(q, req)) return bad();
      CdmRegion* cdm = cdms.owned(q.peer);
      if (!cdm) return;
      dgrams.kick(*cdm);  // anything held back goes first
      // A client past its limit (the library checks the per-process one) or its credential's
      // sees the post TERMINATED.
      if (!quotas.may_take(q.peer, Resource::kDatagrams, cdm->pid(), cdm->credential()))
        dgrams.refuse(*cdm, req, rc::kErrorResource);
      else if (dgrams.post(*cdm, req) == rc::kSuccess)
        ++ctr.datagrams_posted;
      return;
    }
    case Op::kDgramKick: {
      ctl::DgramKick req;
      if (!parse(q, req)) return bad();
      if (CdmRegion* cdm = cdms.owned(q.peer)) dgrams.kick(*cdm);
      return;
    }
    case Op::kDgramIncoming: {
      ctl::DgramIncoming m;
      if (!parse(q, m) || !from_daemon) return bad();
      return dgrams.incoming(m);
    }
    case Op::kDgramMatched: {
      ctl::DgramMatched m;
      if (!parse(q, m) || !from_daemon) return bad();
      return dgrams.matched(m);
    }
    case Op::kDgramRetract: {
      ctl::DgramRetract m;
      if (!parse(q, m) || !from_daemon) return bad();
      return dgrams.retract(m);
    }
    default:
      return bad();
  }
}

}  // namespace nicemu::daemon
