// What the control handlers (control/*.cpp, members of Node by area) share: the reply
// framing and the parse of a fixed-size request.
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

}  // namespace nicemu::daemon
