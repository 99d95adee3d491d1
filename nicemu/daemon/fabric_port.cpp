#include "nicemu/daemon/fabric_port.h"

#include <algorithm>
#include <cstring>

#include <spdlog/spdlog.h>

#include "nicemu/abi/cq_entry.h"
#include "nicemu/ctl/ctl_client.h"
#include "nicemu/daemon/transport/udp_fabric.h"

namespace nicemu::daemon {

FabricPort::FabricPort(uint32_t self, std::string rundir, StatsPage& stats)
    : self_(self), rundir_(rundir), stats_(stats), links_(std::move(rundir)) {}

std::vector<uint32_t> FabricPort::local_nodes() const {
  std::vector<uint32_t> out = ctl::list_nodes(rundir_);
  std::erase(out, self_);
  return out;
}

void FabricPort::set_transport(UdpFabric* t) {
  transport_ = t;
  if (!t) return;
  t->on_peer_lost([this](uint32_t nic) { peer_lost(nic); });
  t->on_progress([this] { progress(); });
}

bool FabricPort::remote(uint32_t node) { return transport_ && transport_->has(node) && !links_.local(node); }

std::vector<uint32_t> FabricPort::remote_nodes() {
  std::vector<uint32_t> out;
  if (!transport_) return out;
  for (const auto& [nic, endpoint] : transport_->map().nodes())
    if (remote(nic)) out.push_back(nic);
  return out;
}

bool FabricPort::peer_up(uint32_t node) const { return transport_ && transport_->peer_up(node); }
bool FabricPort::overloaded() const { return transport_ && transport_->overloaded(); }

uint64_t FabricPort::reach(uint32_t node) {
  if (!remote(node)) return abi::cqe::kErrNoPeer;
  return transport_->peer_up(node) ? abi::cqe::kOk : abi::cqe::kErrTransient;
}

bool FabricPort::send(uint32_t node, const void* msg, size_t len) {
  const bool ok = remote(node) ? transport_->send(node, msg, len) : links_.send(node, msg, len);
  stats_.link_sent(node, len, ok);
  return ok;
}

bool FabricPort::send_remote(uint32_t node, const void* msg, size_t len) {
  const bool ok = transport_ && transport_->send(node, msg, len);
  stats_.link_sent(node, len, ok);
  return ok;
}

void FabricPort::route(std::initializer_list<abi::ctl::Op> ops, FabricService& s) {
  for (abi::ctl::Op op : ops) table_.at(static_cast<uint16_t>(op)) = &s;
  if (std::find(services_.begin(), services_.end(), &s) == services_.end()) services_.push_back(&s);
}

void FabricPort::drop(uint32_t from, const char* why) {
  stats_.node(abi::counters::node::malformed_messages).add(1);
  spdlog::warn("nic {}: message from NIC address {} over the fabric dropped: {}", self_, from, why);
}

void FabricPort::deliver(uint32_t from, const uint8_t* msg, size_t len) {
  abi::ctl::Header h;
  if (len < sizeof h) return drop(from, "shorter than a header");
  std::memcpy(&h, msg, sizeof h);
  if (h.magic != abi::ctl::kMagic || h.version != abi::ctl::kVersion || h.length != len)
    return drop(from, "bad header");
  FabricService* s = h.op < table_.size() ? table_[h.op] : nullptr;
  if (!s) return drop(from, "not a daemon-to-daemon message");
  if (const char* why = s->receive(from, h, msg, len)) drop(from, why);
}

void FabricPort::peer_lost(uint32_t node) {
  for (FabricService* s : services_) s->peer_lost(node);
}

void FabricPort::progress() {
  uint64_t wake = 0;
  for (FabricService* s : services_) {
    s->progress();
    if (uint64_t us = s->wake_after(); us && (!wake || us < wake)) wake = us;
  }
  if (wake && transport_) transport_->progress_in(wake);
}

}  // namespace nicemu::daemon
