// What the control handlers (control/handlers.h) share: who is asking (Peer), the request
// being handled and its reply, the reply framing, the parse of a fixed-size request, and
// the shape of a request of an attached CDM.
#pragma once
#include <sys/types.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "nicemu/abi/ctl_protocol.h"
#include "nicemu/abi/gni_values.h"
#include "nicemu/daemon/control/node_counters.h"

namespace nicemu::daemon {

namespace ctl = nicemu::abi::ctl;
// The handlers' vocabulary: gni_return_t values as rc::, request types as Op.
namespace rc = nicemu::abi::gni;
using ctl::Op;

class CdmRegion;

// Descriptors sent along with a reply (SCM_RIGHTS), -1 = none; owned by the node. A CDM
// region takes two (read-only section, heap: abi/region_map.h).
using PassFds = std::array<int, 3>;

// Identity of a control connection (SO_PEERCRED) and the CDM it attached, if any.
struct Peer {
  uint64_t id = 0;
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  uint64_t attach_id = 0;  // 0 = this connection attached nothing
  uint64_t refusals = 0;   // credential and limit refusals on this connection (log rate limit)
  std::string status_snapshot;  // the status document being read in pages (ctl::Status)
  // Sends a reply later, for a request a handler answered with an empty reply (a DRC
  // change waiting for the other daemons); does nothing once the connection is gone.
  std::function<void(std::vector<char>)> reply_later;
};

// One control request being handled (header checked: magic, version, length). The handler
// fills `reply` and may set `pass_fds` to descriptors the caller sends along.
struct Request {
  Peer& peer;
  const ctl::Header& h;
  const char* msg;
  size_t len;
  std::vector<char>& reply;
  PassFds& pass_fds;
};

// A reply of type `Rep` (fields zero, header for `req`) in `buf`.
template <typename Rep>
Rep& init_reply(std::vector<char>& buf, const abi::ctl::Header& req) {
  buf.assign(sizeof(Rep), 0);
  auto* r = reinterpret_cast<Rep*>(buf.data());
  r->r.h = abi::ctl::Header{abi::ctl::kMagic, abi::ctl::kVersion, req.op, req.seq, static_cast<uint32_t>(sizeof(Rep))};
  return *r;
}
struct PlainReply {
  abi::ctl::Reply r;
};

// A malformed request: counted, answered GNI_RC_INVALID_PARAM.
inline void bad(Request& q, Counters& ctr) {
  ++ctr.malformed_messages;
  init_reply<PlainReply>(q.reply, q.h).r.rc = rc::kInvalidParam;
}

// The request as `Req` if it is exactly one (copied out of the socket buffer first).
template <typename Req>
bool parse(const Request& q, Req& out) {
  if (q.len != sizeof(Req)) return false;
  std::memcpy(&out, q.msg, sizeof(Req));
  return out.h.length == sizeof(Req);
}

// A fixed-size request `Req` of the connection's attached CDM `cdm`, answered with `Rep`:
// malformed -> bad(); no CDM -> GNI_RC_INVALID_STATE; else the reply's code is what
// `f(cdm, req, reply)` returns (it fills the rest of the reply).
template <typename Req, typename Rep, typename F>
void with_cdm(Request& q, Counters& ctr, CdmRegion* cdm, F f) {
  Req req;
  if (!parse(q, req)) return bad(q, ctr);
  auto& r = init_reply<Rep>(q.reply, q.h);
  r.r.rc = cdm ? f(*cdm, req, r) : rc::kInvalidState;
}

}  // namespace nicemu::daemon
