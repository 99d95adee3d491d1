// The node's status document (nicemuctl status), paged over the control socket.
#include <algorithm>
#include <nlohmann/json.hpp>

#include "nicemu/daemon/control/handlers.h"

namespace nicemu::daemon {

void control::status(Request& q, const std::function<nlohmann::json(const Peer&)>& document, Counters& ctr) {
  ctl::Status req;
  if (!parse(q, req)) return bad(q, ctr);
  if (req.offset == 0) q.peer.status_snapshot = document(q.peer).dump();
  const std::string& js = q.peer.status_snapshot;
  if (req.offset > js.size() || (req.offset != 0 && req.offset == js.size())) return bad(q, ctr);
  size_t n = std::min<size_t>(ctl::kStatusPage, js.size() - req.offset);
  q.reply.assign(sizeof(ctl::StatusReply) + n, 0);
  ctl::StatusReply r{};
  r.r.h = ctl::Header{ctl::kMagic, ctl::kVersion, q.h.op, q.h.seq, static_cast<uint32_t>(q.reply.size())};
  r.r.rc = rc::kSuccess;
  r.json_length = static_cast<uint32_t>(n);
  r.total_length = static_cast<uint32_t>(js.size());
  std::memcpy(q.reply.data(), &r, sizeof(r));
  std::memcpy(q.reply.data() + sizeof(r), js.data() + req.offset, n);
  if (req.offset + n == js.size()) std::string().swap(q.peer.status_snapshot);
}

}  // namespace nicemu::daemon
