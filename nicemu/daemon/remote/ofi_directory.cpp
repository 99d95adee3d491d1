#include "nicemu/daemon/remote/ofi_directory.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstring>

#include <nlohmann/json.hpp>

#include "nicemu/abi/daemon_protocol.h"
#include "nicemu/abi/gni_values.h"
#include "nicemu/abi/ofi_msgq.h"

namespace nicemu::daemon {

namespace ctl = nicemu::abi::ctl;
namespace gni = nicemu::abi::gni;

OfiDirectory::OfiDirectory(uint32_t self, RegionDirectory& regions, FabricSend send)
    : self_(self), regions_(regions), send_(std::move(send)) {}

bool OfiDirectory::publish(uint64_t attach_id, const uint8_t* addr, uint32_t len) {
  if (attach_id == 0 || len == 0 || len > ctl::kOfiAddrMax) return false;
  addrs_[attach_id].assign(addr, addr + len);
  ++ctr_.published;
  note_host(addr, len);
  return true;
}

// The IP of a socket address (what tcp, udp and verbs providers' fi_getname give), so that
// status shows on which network the ranks' endpoints live (veth of a namespace host, not
// 127.0.0.1); other address formats are not shown.
void OfiDirectory::note_host(const uint8_t* addr, uint32_t len) {
  if (hosts_.size() >= kMaxHosts || len < sizeof(sa_family_t)) return;
  sa_family_t family;
  std::memcpy(&family, addr, sizeof family);
  char text[INET6_ADDRSTRLEN] = {};
  if (family == AF_INET && len >= sizeof(sockaddr_in)) {
    sockaddr_in sin;
    std::memcpy(&sin, addr, sizeof sin);
    if (!inet_ntop(AF_INET, &sin.sin_addr, text, sizeof text)) return;
  } else if (family == AF_INET6 && len >= sizeof(sockaddr_in6)) {
    sockaddr_in6 sin6;
    std::memcpy(&sin6, addr, sizeof sin6);
    if (!inet_ntop(AF_INET6, &sin6.sin6_addr, text, sizeof text)) return;
  } else {
    return;
  }
  hosts_.insert(text);
}

std::vector<char> OfiDirectory::reply(const ctl::Header& h, int32_t rc, const uint8_t* addr, uint32_t len) {
  std::vector<char> buf(sizeof(ctl::OfiLookupReply), 0);
  auto* r = reinterpret_cast<ctl::OfiLookupReply*>(buf.data());
  r->r.h = ctl::Header{ctl::kMagic, ctl::kVersion, h.op, h.seq, static_cast<uint32_t>(buf.size())};
  r->r.rc = rc;
  if (rc == gni::kSuccess) {
    r->addr_len = len;
    std::memcpy(r->addr, addr, len);
  }
  return buf;
}

void OfiDirectory::answer(const Pending& p, int32_t rc, const uint8_t* addr, uint32_t len) {
  if (p.later) p.later(reply(p.h, rc, addr, len));
}

void OfiDirectory::lookup(const ctl::Header& h, const ctl::OfiLookup& req, uint32_t ptag, uint32_t cookie,
                          ReplyLater later, std::vector<char>& now, bool remote_node) {
  ++ctr_.lookups;
  // A node of this host is reached through shared memory, never over ofi.
  if (!remote_node) {
    now = reply(h, gni::kNoMatch, nullptr, 0);
    return;
  }
  const uint64_t id = next_id_++;
  ctl::OfiAsk a{};
  a.h = ctl::Header{ctl::kMagic, ctl::kVersion, static_cast<uint16_t>(ctl::Op::kOfiAsk), 0, sizeof a};
  a.id = id;
  a.route = req.route;
  a.ptag = ptag;
  a.cookie = cookie;
  if (!send_(req.node, &a, sizeof a)) {
    now = reply(h, gni::kErrorResource, nullptr, 0);
    return;
  }
  ++ctr_.asked;
  pending_.emplace(id, Pending{h, req.node, std::move(later), std::chrono::steady_clock::now() + kAskTimeout});
}

const char* OfiDirectory::receive(uint32_t from, const ctl::Header& h, const uint8_t* msg, size_t len) {
  if (h.op == static_cast<uint16_t>(ctl::Op::kOfiAsk)) {
    ctl::OfiAsk a;
    if (len != sizeof a) return "bad OfiAsk";
    std::memcpy(&a, msg, sizeof a);
    ctl::OfiAnswer r{};
    r.h = ctl::Header{ctl::kMagic, ctl::kVersion, static_cast<uint16_t>(ctl::Op::kOfiAnswer), 0, sizeof r};
    r.id = a.id;
    r.rc = gni::kNoMatch;
    // The CDM of that route in the asker's credential, as an RMA request finds its target:
    // a CDM of another job is not found, so its address is never told.
    uint64_t st = 0;
    uint64_t target = 0;
    if (a.route == abi::ofimsgq::kMsgqRoute) {
      // MSGQ over ofi: the first member of that credential's segment with an address.
      if (msgq_members_)
        for (uint64_t id : msgq_members_(a.ptag, a.cookie))
          if (addrs_.count(id)) {
            target = id;
            break;
          }
    } else if (auto region = regions_.resolve(RegionKey{self_, a.route, a.ptag, a.cookie}, st);
               region && region->alive()) {
      target = region->attach_id();
    }
    if (target) {
      if (auto it = addrs_.find(target); it != addrs_.end()) {
        r.rc = gni::kSuccess;
        r.addr_len = static_cast<uint32_t>(it->second.size());
        std::memcpy(r.addr, it->second.data(), it->second.size());
        ++ctr_.answered;
      }
    }
    if (r.rc != gni::kSuccess) ++ctr_.refused;
    send_(from, &r, sizeof r);  // lost if the fabric refuses now: the asker times out
    return nullptr;
  }
  if (h.op == static_cast<uint16_t>(ctl::Op::kOfiAnswer)) {
    ctl::OfiAnswer r;
    if (len != sizeof r) return "bad OfiAnswer";
    std::memcpy(&r, msg, sizeof r);
    auto it = pending_.find(r.id);
    if (it == pending_.end() || it->second.node != from) return nullptr;  // timed out meanwhile
    const bool ok = r.rc == gni::kSuccess && r.addr_len > 0 && r.addr_len <= ctl::kOfiAddrMax;
    answer(it->second, ok ? gni::kSuccess : gni::kNoMatch, r.addr, ok ? r.addr_len : 0);
    pending_.erase(it);
    return nullptr;
  }
  return "not an ofi message";
}

void OfiDirectory::peer_lost(uint32_t node) {
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (it->second.node != node) {
      ++it;
      continue;
    }
    answer(it->second, gni::kErrorResource, nullptr, 0);
    it = pending_.erase(it);
  }
}

void OfiDirectory::progress() {
  const auto now = std::chrono::steady_clock::now();
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (it->second.deadline > now) {
      ++it;
      continue;
    }
    ++ctr_.timeouts;
    answer(it->second, gni::kErrorResource, nullptr, 0);
    it = pending_.erase(it);
  }
}

nlohmann::json OfiDirectory::status() const {
  return nlohmann::json{{"published", addrs_.size()}, {"publications", ctr_.published}, {"lookups", ctr_.lookups},
                        {"asked", ctr_.asked},        {"answered", ctr_.answered},       {"refused", ctr_.refused},
                        {"timeouts", ctr_.timeouts},  {"waiting", pending_.size()},
                        {"hosts", hosts_}};
}

}  // namespace nicemu::daemon
