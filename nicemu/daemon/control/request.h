// What the control handlers (control/*.cpp, members of Node by area) share: the reply
// framing, the parse of a fixed-size request, and the shape of a request of an attached CDM.
#pragma once
#include <cstring>
#include <vector>

#include "nicemu/abi/ctl_protocol.h"
#include "nicemu/abi/gni_values.h"
#include "nicemu/daemon/node.h"

namespace nicemu::daemon {

// The handlers' vocabulary: gni_return_t values as rc::, request types as Op.
namespace rc = nicemu::abi::gni;
using ctl::Op;

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

// The request as `Req` if it is exactly one (copied out of the socket buffer first).
template <typename Req>
bool parse(const Node::Request& q, Req& out) {
  if (q.len != sizeof(Req)) return false;
  std::memcpy(&out, q.msg, sizeof(Req));
  return out.h.length == sizeof(Req);
}

template <typename Req, typename Rep, int (Node::*F)(Node::Request&, CdmRegion&, const Req&, Rep&)>
void Node::with_cdm(Request& q) {
  Req req;
  if (!parse(q, req)) return bad(q);
  auto& r = init_reply<Rep>(q.reply, q.h);
  CdmRegion* cdm = owned_cdm(q.peer);
  r.r.rc = cdm ? (this->*F)(q, *cdm, req, r) : rc::kInvalidState;
}

}  // namespace nicemu::daemon
