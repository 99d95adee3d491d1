// The node's status document (nicemuctl status), paged over the control socket, and the
// refresh of the counter page.
#include "nicemu/daemon/control/request.h"

#include <unistd.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "nicemu/daemon/transport/udp_fabric.h"
#include "nicemu/fault/fault_spec.h"

namespace nicemu::daemon {

using namespace nicemu::abi;

void to_json(nlohmann::json& j, const Counter& c) { j = c.value(); }

void Node::on_status(Request& q) {
  ctl::Status req;
  if (!parse(q, req)) return bad(q);
  if (req.offset == 0) q.peer.status_snapshot = status(&q.peer).dump();
  const std::string& js = q.peer.status_snapshot;
  if (req.offset > js.size() || (req.offset != 0 && req.offset == js.size())) return bad(q);
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

nlohmann::json Node::status(const Peer* viewer) const {
  using nlohmann::json;
  // Another user's cookie is not shown: it would not let the viewer in (the uid check
  // does not depend on secrecy), but it is the job's business, as on a Cray.
  auto shown_cookie = [&](const Credential& c) -> json {
    if (!viewer || may_use(*viewer, c)) return c.cookie;
    return nullptr;
  };
  json cdms = json::array();
  for (const auto& [id, r] : cdms_) {
    cdms.push_back({{"attach_id", id},
                    {"pid", r->pid()},
                    {"inst_id", r->inst_id()},
                    {"ptag", r->credential().ptag},
                    {"cookie", shown_cookie(r->credential())},
                    {"alive", r->alive()},
                    {"registrations", r->live_registrations()},
                    {"cqs", r->live_cqs()},
                    {"mailboxes", r->mailboxes()},
                    {"heap_bytes", r->heap_in_use()}});
  }
  json msgqs = json::array();
  for (const auto& [c, seg] : msgqs_) msgqs.push_back(seg->status());
  json creds = json::array();
  for (const auto& [c, o] : credentials_) {
    json e{{"ptag", c.ptag}, {"cookie", shown_cookie(c)}, {"uid", o.uid}};
    if (o.has_gid) e["gid"] = o.gid;
    if (auto d = drc_.find(o.drc_id); o.drc_id != 0 && d != drc_.end()) {
      json grants = json::array();
      for (const auto& [kind, value] : d->second.grants)
        grants.push_back(std::string(drc_grant_name(kind)) + ":" + std::to_string(value));
      e["drc"] = {{"id", o.drc_id}, {"flex", d->second.flex}, {"grants", grants}};
    }
    creds.push_back(e);
  }
  auto up = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  return json{{"nic_addr", cfg_.nic_addr},
              {"device_type", cfg_.device_type == rc::kDeviceAries ? "aries" : "gemini"},
              {"pid", getpid()},
              {"socket", cfg_.socket_path},
              {"counter_page", stats_.path()},
              {"uptime_s", up},
              {"credentials", creds},
              {"cdms", cdms},
              {"bte", bte_.status()},
              {"remote_ops", {{"initiator", remote_out_.status()}, {"target", remote_in_.status()}}},
              {"collective_engine", ce_.status()},
              {"msgq_relay", msgq_relay_.status()},
              {"msgq", msgqs},
              {"fault", {{"enabled", fault_.config().enabled != 0},
                         {"seed", fault_.config().seed},
                         {"spec", nicemu::fault::to_spec(fault_.config())},
                         {"page", fault_.path()}}},
              {"fabric", port_.transport() ? port_.transport()->status() : nlohmann::json(nullptr)},
              {"smsg_relay", smsg_.status()},
              {"counters",
               {{"connections", ctr_.connections},
                {"attaches", ctr_.attaches},
                {"attach_refused", ctr_.attach_refused},
                {"detaches", ctr_.detaches},
                {"registrations", ctr_.registrations},
                {"deregistrations", ctr_.deregistrations},
                {"cq_creates", ctr_.cq_creates},
                {"cq_destroys", ctr_.cq_destroys},
                {"peer_lookups", ctr_.peer_lookups},
                {"peer_lookup_failures", ctr_.peer_lookup_failures},
                {"mbox_opens", ctr_.mbox_opens},
                {"malformed_messages", ctr_.malformed_messages},
                {"credentials_issued", ctr_.credentials_issued},
                {"datagrams_posted", ctr_.datagrams_posted},
                {"datagrams_cancelled", ctr_.datagrams_cancelled},
                {"datagrams_pending", dgrams_.pending_posts()},
                {"datagrams_incoming", dgrams_.incoming_count()},
                {"datagrams_backlog", dgrams_.backlog_count()},
                {"datagrams_lost", dgrams_.lost_count()},
                {"msgq_joins", ctr_.msgq_joins},
                {"msgq_join_refused", ctr_.msgq_join_refused},
                {"msgq_lookups", ctr_.msgq_lookups},
                {"credential_refused", ctr_.credential_refused},
                {"resource_refused", ctr_.resource_refused},
                {"accept_deferred", ctr_.accept_deferred}}}};
}

void Node::refresh_counters() {
  // Also the periodic tick for MSGQ messages from other hosts (held for ring room, or
  // waiting for the fabric) and the credits of their ring slots.
  if (msgq_relay_.busy()) msgq_relay_.progress();
  for (auto& [id, r] : cdms_) stats_.refresh(id, r->counter_block());
  stats_.refreshed();
}

}  // namespace nicemu::daemon
