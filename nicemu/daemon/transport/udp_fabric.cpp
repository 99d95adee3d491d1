#include "nicemu/daemon/transport/udp_fabric.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/udp.h>
#include <sodium.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

namespace nicemu::daemon {

using namespace nicemu::abi::wire;
using fabric::PacketError;
namespace nc = nicemu::abi::counters::node;

namespace {
// Probes to a silent peer: often enough to notice its return quickly, rare enough to cost
// nothing.
constexpr uint64_t kProbeIntervalUs = 500000;
std::string endpoint_text(const sockaddr_in& a) {
  char buf[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &a.sin_addr, buf, sizeof buf);
  return std::string(buf) + ":" + std::to_string(ntohs(a.sin_port));
}
}  // namespace

uint64_t UdpFabric::now_us() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

UdpFabric::UdpFabric(asio::io_context& io, uint32_t self, fabric::FabricMap map, const uint8_t (&key)[kKeyBytes],
                     StatsPage& stats, Deliver deliver, bool use_uring, std::optional<MacAlg> mac,
                     fabric::ChannelConfig ccfg)
    : io_(io),
      self_(self),
      map_(std::move(map)),
      auth_(key, mac ? *mac : *fabric::parse_mac_alg("auto")),
      stats_(stats),
      deliver_(std::move(deliver)),
      ccfg_(ccfg),
      sd_(io),
      uring_sd_(io),
      timer_(io),
      progress_timer_(io),
      announce_timer_(io) {
  const fabric::Endpoint* me = map_.find(self_);
  if (!me) throw std::runtime_error("fabric map has no entry for this node (NIC address " + std::to_string(self_) + ")");
  do randombytes_buf(&epoch_, sizeof epoch_);
  while (epoch_ == 0);
  fd_ = ::socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd_ < 0) throw std::runtime_error(std::string("fabric socket: ") + std::strerror(errno));
  // Room for bursts while the loop is busy elsewhere; the window bounds what peers send.
  int sz = 4 << 20;
  setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &sz, sizeof sz);
  setsockopt(fd_, SOL_SOCKET, SO_SNDBUF, &sz, sizeof sz);
  // A predecessor that just exited may still hold the port for a moment: retry briefly.
  int bound = -1;
  for (int i = 0; i < 40 && (bound = ::bind(fd_, reinterpret_cast<const sockaddr*>(&me->addr), sizeof me->addr)) != 0 &&
                  errno == EADDRINUSE;
       ++i)
    ::usleep(50000);
  if (bound != 0) {
    int e = errno;
    ::close(fd_);
    throw std::runtime_error("fabric: cannot bind " + endpoint_text(me->addr) + ": " + std::strerror(e));
  }
  port_ = me->port;
  sd_.assign(fd_);
  // UDP GRO (Linux 5.0+): the kernel hands a sender's run of packets over as one datagram,
  // so the receive path too is paid once per run rather than once per packet.
  {
    int on = 1;
    gro_ = ::setsockopt(fd_, SOL_UDP, UDP_GRO, &on, sizeof on) == 0;
    rx_slot_ = gro_ ? 65536 : kMaxPacket;
  }
  data_plane_ = "recvmmsg/sendmmsg (io_uring off)";
  if (use_uring) {
    auto u = std::make_unique<UringReceiver>();
    std::string why;
    if (u->init(fd_, rx_slot_, why)) {
      uring_sd_.assign(::dup(u->event_fd()));
      uring_ = std::move(u);
      data_plane_ = std::string("io_uring multishot recvmsg + provided buffers") +
                    (uring_->cooperative() ? " (cooperative task running)" : "") + ", sendmmsg";
    } else {
      data_plane_ = "recvmmsg/sendmmsg (io_uring unavailable: " + why + ")";
      spdlog::warn("fabric: io_uring receive unavailable ({}); using recvmmsg", why);
    }
  }

  rx_buf_.resize(kBatch * rx_slot_);
  tx_buf_.resize(kTxBatch * kMaxPacket);
  scratch_.resize(kMaxPacket);
  for (size_t i = 0; i < kBatch; ++i) rx_iov_[i] = {rx_buf_.data() + i * rx_slot_, rx_slot_};
  for (size_t i = 0; i < kTxBatch; ++i) tx_iov_[i] = {tx_buf_.data() + i * kMaxPacket, 0};
  // UDP GSO (Linux 4.18+): the per-packet cost of the kernel's send path (most of a bulk
  // transfer's CPU time here) is paid once per run of packets. Each packet stays a whole
  // datagram with its own header and MAC; only the system call and the stack are shared.
  {
    int seg = static_cast<int>(kMaxPacket);
    gso_ = ::setsockopt(fd_, SOL_UDP, UDP_SEGMENT, &seg, sizeof seg) == 0;
    seg = 0;
    if (gso_) ::setsockopt(fd_, SOL_UDP, UDP_SEGMENT, &seg, sizeof seg);  // per send, not per socket
    data_plane_ += gso_ ? ", UDP GSO" : ", no UDP GSO";
    data_plane_ += gro_ ? ", UDP GRO" : ", no UDP GRO";
  }
  if (const char* s = std::getenv("NICEMU_FABRIC_IMPAIR"); s && *s) {
    uint64_t seed = 1;
    std::string spec(s);
    for (size_t pos = 0; pos < spec.size();) {
      size_t end = spec.find(',', pos);
      if (end == std::string::npos) end = spec.size();
      std::string kv = spec.substr(pos, end - pos);
      pos = end + 1;
      size_t eq = kv.find('=');
      if (eq == std::string::npos) continue;
      std::string k = kv.substr(0, eq);
      double v = std::atof(kv.c_str() + eq + 1);
      if (k == "loss") impair_.loss = v;
      if (k == "dup") impair_.dup = v;
      if (k == "reorder") impair_.reorder = v;
      if (k == "seed") seed = static_cast<uint64_t>(v);
    }
    impair_.on = true;
    impair_.rng.seed(seed ^ self_);
    spdlog::warn("fabric: test impairment of outgoing packets: loss {} dup {} reorder {} seed {}", impair_.loss,
                 impair_.dup, impair_.reorder, seed);
  }
  auto c = [&](nc::Counter k) { return stats_.node(k); };
  ctr_ = Ctr{c(nc::fabric_rx_packets),     c(nc::fabric_tx_packets),        c(nc::fabric_rx_bytes),
             c(nc::fabric_tx_bytes),       c(nc::fabric_drop_length),       c(nc::fabric_drop_magic),
             c(nc::fabric_drop_version),   c(nc::fabric_drop_mac),          c(nc::fabric_drop_records),
             c(nc::fabric_drop_unknown_source), c(nc::fabric_drop_stale_epoch), c(nc::fabric_peer_restarts),
             c(nc::fabric_duplicates),     c(nc::fabric_out_of_window),     c(nc::fabric_retransmits),
             c(nc::fabric_peer_downs),     c(nc::fabric_send_refused),      c(nc::fabric_messages_abandoned),
             c(nc::fabric_send_errors),    c(nc::fabric_fault_drops),       c(nc::fabric_fault_dups),
             c(nc::fabric_fault_delays),   c(nc::fabric_fault_corrupts),    c(nc::fabric_send_deferred)};
  spdlog::info("fabric: NIC address {} on udp {} (epoch {:#x}), {} nodes in the map; {}; packets sealed with {}",
               self_, endpoint_text(me->addr), epoch_, map_.nodes().size(), data_plane_,
               fabric::mac_alg_name(auth_.alg()));
}

UdpFabric::~UdpFabric() { stop(); }

void UdpFabric::start() {
  if (uring_)
    arm_uring();
  else
    arm_read();
  announce();
}

void UdpFabric::announce() {
  if (stopped_) return;
  size_t n = 0;
  for (const auto& [nic, e] : map_.nodes()) {
    if (nic == self_) continue;
    PacketHeader h{};
    h.flags = kFlagAnnounce;
    h.dst_node = nic;
    auto it = peers_.find(nic);
    h.dst_epoch = it == peers_.end() ? 0 : it->second.epoch;
    queue_sealed(h, nullptr, 0, e.addr, nullptr);
    ++n;
  }
  send_batch();
  if (announce_round_ == 0)
    spdlog::info("fabric: epoch {:#x} announced to the {} other nodes of the map", epoch_, n);
  if (++announce_round_ >= kAnnounceRounds) return;
  announce_timer_.expires_after(std::chrono::microseconds(kAnnounceFirstGapUs << (announce_round_ - 1)));
  announce_timer_.async_wait([this](const asio::error_code& e) {
    if (!e) announce();
  });
}

void UdpFabric::arm_uring() {
  if (stopped_) return;
  uring_sd_.async_wait(asio::posix::stream_descriptor::wait_read, [this](const asio::error_code& e) {
    if (e || stopped_) return;
    on_uring();
    arm_uring();
  });
}

void UdpFabric::on_uring() {
  in_rx_ = true;
  uring_->drain([this](const uint8_t* p, size_t n, const sockaddr_in& from, bool trunc, size_t segment) {
    receive_datagram(p, n, from, trunc, segment);
  });
  in_rx_ = false;
  flush_all();
}

void UdpFabric::stop() {
  if (stopped_) return;
  stopped_ = true;
  asio::error_code ec;
  timer_.cancel();
  progress_timer_.cancel();
  announce_timer_.cancel();
  sd_.cancel(ec);
  uring_sd_.cancel(ec);
  uring_sd_.close(ec);
  uring_.reset();  // before the socket it receives from
  sd_.close(ec);  // closes fd_
}

UdpFabric::Peer* UdpFabric::peer(uint32_t nic) {
  if (auto it = peers_.find(nic); it != peers_.end()) return &it->second;
  const fabric::Endpoint* e = map_.find(nic);
  if (!e || nic == self_) return nullptr;
  // Created on first contact: a channel's buffers are sized once, here.
  Peer& p = peers_[nic];
  p.nic = nic;
  p.slot = static_cast<uint32_t>(slots_.size());
  slots_.push_back(&p);
  p.addr = e->addr;
  p.ch = std::make_unique<fabric::ReliableChannel>(
      ccfg_,
      [this, nic](RecordType type, const uint8_t* data, size_t len) {
        if (type == RecordType::kCtl) deliver_(nic, data, len);
      },
      &load_);
  return &p;
}

bool UdpFabric::peer_up(uint32_t nic) const {
  auto it = peers_.find(nic);
  return it == peers_.end() || it->second.ch->state() == fabric::ReliableChannel::State::kUp;
}

bool UdpFabric::send(uint32_t nic, const void* msg, size_t len) {
  Peer* p = peer(nic);
  if (!p || stopped_) return false;
  if (!p->ch->send(RecordType::kCtl, msg, len)) {
    ++ctr_.send_refused;
    return false;
  }
  mark(*p);
  // Inside a receive batch the flush at its end sends it along with the acks. Otherwise one
  // flush is queued on the loop, right behind the current handler, so every message sent
  // meanwhile (to any peer) shares packets: the lever for small-message rate. (Flushing an
  // idle channel at once instead measured no better here and caused spurious timeouts
  // under fabric_bench's bursts.)
  if (in_rx_) return true;
  if (!flush_posted_) {
    flush_posted_ = true;
    asio::post(io_, [this] {
      flush_posted_ = false;
      if (!stopped_) flush_all();
    });
  }
  return true;
}

void UdpFabric::arm_read() {
  if (stopped_) return;
  sd_.async_wait(asio::posix::stream_descriptor::wait_read, [this](const asio::error_code& e) {
    if (e || stopped_) return;
    on_readable();
    arm_read();
  });
}

void UdpFabric::on_readable() {
  in_rx_ = true;
  // Drain in batches; the socket is non-blocking, so an empty queue ends the loop. A bound
  // on rounds keeps the control socket and timers served under a flood.
  for (int round = 0; round < 16; ++round) {
    for (size_t i = 0; i < kBatch; ++i) {
      rx_msgs_[i].msg_hdr = msghdr{};
      rx_msgs_[i].msg_hdr.msg_name = &rx_addr_[i];
      rx_msgs_[i].msg_hdr.msg_namelen = sizeof(sockaddr_in);
      rx_msgs_[i].msg_hdr.msg_iov = &rx_iov_[i];
      rx_msgs_[i].msg_hdr.msg_iovlen = 1;
      rx_msgs_[i].msg_hdr.msg_control = rx_cmsg_[i].buf;
      rx_msgs_[i].msg_hdr.msg_controllen = sizeof rx_cmsg_[i].buf;
    }
    int n = ::recvmmsg(fd_, rx_msgs_.data(), kBatch, MSG_DONTWAIT, nullptr);
    if (n <= 0) break;
    for (int i = 0; i < n; ++i) {
      msghdr& m = rx_msgs_[i].msg_hdr;
      size_t segment = 0;
      for (cmsghdr* c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c))
        if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO && c->cmsg_len >= CMSG_LEN(sizeof(int))) {
          int v = 0;
          std::memcpy(&v, CMSG_DATA(c), sizeof v);
          if (v > 0) segment = static_cast<size_t>(v);
        }
      receive_datagram(rx_buf_.data() + i * rx_slot_, rx_msgs_[i].msg_len, rx_addr_[i], (m.msg_flags & MSG_TRUNC) != 0,
                       segment);
    }
    if (n < static_cast<int>(kBatch)) break;
  }
  in_rx_ = false;
  flush_all();
}

void UdpFabric::receive_datagram(const uint8_t* p, size_t n, const sockaddr_in& from, bool truncated,
                                 size_t segment) {
  // A datagram larger than our buffer arrives truncated: its length field will not match,
  // so it is dropped as malformed. Lengths above kMaxPacket likewise.
  if (truncated) return receive_one(p, kMaxPacket + 1, from);
  if (segment == 0 || segment >= n) return receive_one(p, std::min(n, kMaxPacket + 1), from);
  for (size_t off = 0; off < n; off += segment) receive_one(p + off, std::min({segment, n - off, kMaxPacket + 1}), from);
}

void UdpFabric::receive_one(const uint8_t* p, size_t n, const sockaddr_in& from) {
  PacketHeader h;
  PacketError err = n > kMaxPacket ? PacketError::kBadLength : fabric::check_packet(p, n, auth_, h);
  switch (err) {
    case PacketError::kOk: break;
    case PacketError::kShort:
    case PacketError::kBadLength: ++ctr_.short_or_bad_length; return;
    case PacketError::kBadMagic: ++ctr_.bad_magic; return;
    case PacketError::kBadVersion: ++ctr_.bad_version; return;
    case PacketError::kBadMac: ++ctr_.bad_mac; return;
    case PacketError::kBadRecords: ++ctr_.bad_records; return;
  }
  // Authenticated; it must also come from where the map says its sender lives, to us.
  const bool announce = (h.flags & kFlagAnnounce) != 0;
  auto from_map = [&](const sockaddr_in& a) {
    return a.sin_addr.s_addr == from.sin_addr.s_addr && a.sin_port == from.sin_port;
  };
  Peer* pp = nullptr;
  if (h.dst_node == self_ && !announce) {
    pp = peer(h.src_node);
  } else if (h.dst_node == self_) {
    // An announce from a node we hold nothing for needs no channel: nothing to start over.
    if (auto it = peers_.find(h.src_node); it != peers_.end()) {
      pp = &it->second;
    } else if (const fabric::Endpoint* e = h.src_node != self_ ? map_.find(h.src_node) : nullptr;
               e && from_map(e->addr)) {
      ++ctr_.rx_packets;
      ctr_.rx_bytes.add(n);
      return;
    }
  }
  if (!pp || !from_map(pp->addr)) {
    ++ctr_.unknown_source;
    return;
  }
  Peer& peer = *pp;
  for (uint64_t old : peer.retired)
    if (old && old == h.src_epoch) {
      ++ctr_.stale_epoch;
      return;
    }
  // From here on the channel hears of it (an epoch, an ack, records, a request for an ack):
  // the flush after this batch looks at it.
  mark(peer);
  if (peer.epoch != h.src_epoch) {
    if (peer.epoch != 0) {
      ++ctr_.peer_restarts;
      spdlog::warn("fabric: NIC address {} restarted (epoch {:#x} -> {:#x}{}); its channel starts over", peer.nic,
                   peer.epoch, h.src_epoch, announce ? ", announced" : "");
      std::move_backward(peer.retired.begin(), peer.retired.end() - 1, peer.retired.end());
      peer.retired[0] = peer.epoch;
      peer.ch->reset();
      lost(peer.nic);
    }
    peer.epoch = h.src_epoch;
  }
  ++ctr_.rx_packets;
  ctr_.rx_bytes.add(n);
  const bool was_down = peer.ch->state() == fabric::ReliableChannel::State::kDown;
  peer.ch->peer_heard();
  if (was_down) spdlog::info("fabric: NIC address {} answers again", peer.nic);
  peer.last_heard_us = now_us();
  if (announce) return;  // no records, no acknowledgement: the epoch was all it said
  if (h.dst_epoch != 0 && h.dst_epoch != epoch_) {
    // Meant for an earlier incarnation of this daemon: answer with an ack so the peer
    // learns our epoch and starts over; act on nothing in it.
    ++ctr_.stale_epoch;
    peer.ack_now = true;
    return;
  }
  if (h.flags & kFlagAckRequested) peer.ack_now = true;
  peer.ch->on_peer_base(h.base);
  const auto [ext, ext_len] = h.record_count ? fabric::find_sack_ext(p, h) : std::pair<const uint8_t*, size_t>{};
  peer.ch->on_ack(h.ack, h.sack, peer.last_heard_us, ext, ext_len);
  fabric::for_each_record(p, h, [&](const RecordHeader& rh, const uint8_t* payload) {
    // Probes (keep-alives) and the selective-ack extension are unsequenced.
    if (rh.type != static_cast<uint8_t>(RecordType::kCtl)) return;
    peer.ch->on_record(rh, payload);
  });
}

void UdpFabric::queue_packet(Peer& p, uint8_t flags, const uint8_t* records, size_t rec_bytes, uint16_t count) {
  PacketHeader h{};
  h.flags = flags;
  h.dst_node = p.nic;
  h.dst_epoch = p.epoch;
  h.ack = p.ch->ack();
  h.base = p.ch->send_base();
  h.sack = p.ch->sack();
  h.record_count = count;
  queue_sealed(h, records, rec_bytes, p.addr, &p);
  p.ch->ack_sent();
  p.ack_now = false;
}

void UdpFabric::queue_sealed(PacketHeader& h, const uint8_t* records, size_t rec_bytes, const sockaddr_in& to,
                             Peer* p) {
  if (tx_count_ == kTxBatch) send_batch();
  uint8_t* pkt = tx_buf_.data() + tx_count_ * kMaxPacket;
  h.magic = kMagic;
  h.version = kVersion;
  h.length = static_cast<uint16_t>(sizeof h + rec_bytes + kMacBytes);
  h.src_node = self_;
  h.src_epoch = epoch_;
  h.mac_alg = static_cast<uint8_t>(auth_.alg());
  h.packet_number = next_packet_number_++;
  std::memcpy(pkt, &h, sizeof h);
  if (rec_bytes) std::memcpy(pkt + sizeof h, records, rec_bytes);
  auth_.seal(pkt, sizeof h + rec_bytes);
  tx_iov_[tx_count_].iov_len = h.length;
  tx_addr_[tx_count_] = to;
  tx_peer_[tx_count_] = p;
  ++tx_count_;
}

void UdpFabric::flush(Peer& p, uint64_t now) {
  const auto down = fabric::ReliableChannel::State::kDown;
  if (p.ch->state() == down) {
    // Probe a silent peer now and then; its answer brings the channel back.
    if (now >= p.next_probe_us) {
      p.next_probe_us = now + kProbeIntervalUs;
      queue_packet(p, kFlagAckRequested, nullptr, 0, 0);
    }
    return;
  }
  const size_t cap = kMaxPacket - sizeof(PacketHeader) - kMacBytes;
  // Selective acks beyond the header's 64 records go in an ack packet of their own, ahead
  // of the data (an extension would not fit beside a full record).
  if (p.ch->ack_owed() || p.ack_now) {
    uint8_t ext[sizeof(RecordHeader) + kSackExtMax];
    const size_t n = p.ch->sack_ext(ext + sizeof(RecordHeader));
    if (n > 0) {
      const RecordHeader rh{0, static_cast<uint16_t>(n), static_cast<uint8_t>(RecordType::kSack), 0};
      std::memcpy(ext, &rh, sizeof rh);
      queue_packet(p, 0, ext, sizeof rh + n, 1);
    }
  }
  for (;;) {
    uint16_t count = 0;
    const auto before = p.ch->state();
    size_t used = p.ch->fill(now, scratch_.data(), cap, count);
    if (before != down && p.ch->state() == down) {
      spdlog::warn("fabric: NIC address {} silent past the retry budget; its messages are abandoned and new ones "
                   "fail until it answers",
                   p.nic);
      p.next_probe_us = now + kProbeIntervalUs;
      lost(p.nic);
    }
    // Ask for an ack when the window fills, so the sender is not stalled on a delayed one.
    uint8_t flags = p.ch->queued() >= ccfg_.window / 2 ? kFlagAckRequested : 0;
    if (count > 0 || p.ch->ack_owed() || p.ack_now) queue_packet(p, flags, scratch_.data(), used, count);
    if (count == 0 || used == 0 || wait_write_) break;  // refused: wait for the socket to drain
  }
}

void UdpFabric::lost(uint32_t nic) {
  if (!peer_lost_) return;
  asio::post(io_, [this, nic] {
    if (!stopped_ && peer_lost_) peer_lost_(nic);
  });
}

void UdpFabric::progress_in(uint64_t us) {
  if (stopped_ || progress_armed_) return;
  progress_armed_ = true;
  progress_timer_.expires_after(std::chrono::microseconds(us));
  progress_timer_.async_wait([this](const asio::error_code& e) {
    progress_armed_ = false;
    if (!e && !stopped_) flush_all();
  });
}

void UdpFabric::flush_all() {
  if (progress_) progress_();
  uint64_t now = now_us();
  // Only the channels with work: marked since the last flush (a packet from the peer, a
  // message to it, a refused packet) or due (their deadline came). Any other channel's
  // fill() would find nothing to do: its state has not changed since its last flush, and
  // its deadline is in the heap.
  sched_.take_due(now);
  sched_.take(flushing_);
  // While the socket buffer is full nothing is filled: what would go out now would be
  // refused again. The channels count that wait as this host's lateness, not as their
  // peers' silence; the writable socket flushes.
  size_t done = 0;
  for (; done < flushing_.size() && !wait_write_; ++done) flush(*slots_[flushing_[done]], now);
  send_batch();
  for (size_t i = 0; i < flushing_.size(); ++i) {
    Peer& p = *slots_[flushing_[i]];
    if (i >= done) mark(p);  // not flushed (the socket is full): still owed
    fold(p);
    sched_.set_deadline(p.slot, p.ch->state() == fabric::ReliableChannel::State::kDown ? p.next_probe_us
                                                                                      : p.ch->next_deadline());
  }
  arm_timer();
  publish();
  if (const bool over = load_.overloaded(now); over != overloaded_) {
    overloaded_ = over;
    if (over)
      spdlog::warn("fabric: overloaded ({} of the channels late at once, {} answering slowly, or this daemon's loop "
                   "late): peers silent past their horizon get up to {} s before they are declared down",
                   load_.late(), load_.slow(), load_.config().overload_horizon_us / 1000000.0);
    else
      spdlog::info("fabric: no longer overloaded ({} channels late, {} answering slowly): peers silent in it "
                   "keep up to {} s until they answer, the others their own horizons",
                   load_.late(), load_.slow(), load_.config().overload_horizon_us / 1000000.0);
  }
}

void UdpFabric::impaired_send() {
  auto chance = [&](double p) { return impair_.on && std::uniform_real_distribution<double>(0, 1)(impair_.rng) < p; };
  const bool inject = fault_cfg_ && fault_cfg_->enabled;
  const uint64_t now_ns = now_us() * 1000;
  auto out = [&](const void* data, size_t len, const sockaddr_in& to) {
    if (::sendto(fd_, data, len, MSG_DONTWAIT, reinterpret_cast<const sockaddr*>(&to), sizeof to) ==
        static_cast<ssize_t>(len)) {
      ++ctr_.tx_packets;
      ctr_.tx_bytes.add(len);
    }
  };
  for (size_t i = 0; i < tx_count_; ++i) {
    uint8_t* pkt = static_cast<uint8_t*>(tx_iov_[i].iov_base);
    size_t len = tx_iov_[i].iov_len;
    abi::fault::Action act = abi::fault::kNone;
    if (inject && tx_peer_[i]) {
      Peer& p = *tx_peer_[i];
      if (std::memcmp(&p.inj_cfg, fault_cfg_, sizeof p.inj_cfg) != 0) {
        // A new configuration (nicemuctl fault): this peer's decisions start over from it.
        p.inj_cfg = *fault_cfg_;
        p.inj.configure(p.inj_cfg, (uint64_t{self_} << 32) | p.nic, now_ns);
      }
      act = p.inj.decide(abi::fault::kPacket, p.nic, now_ns).action;
      if (act == abi::fault::kLinkDown || p.inj.link_down(p.nic, now_ns)) act = abi::fault::kDrop;
    } else if (inject && len >= sizeof(PacketHeader)) {
      // An epoch announce (outside any channel): the same per-peer rules and link windows,
      // from a stream of its own per peer (bit 31 set), so the channels' decisions replay
      // as before. A delay or corruption of an announce is a loss: the next round resends.
      PacketHeader h;
      std::memcpy(&h, pkt, sizeof h);
      AnnounceFaults& a = announce_faults_[h.dst_node];
      if (std::memcmp(&a.cfg, fault_cfg_, sizeof a.cfg) != 0) {
        a.cfg = *fault_cfg_;
        a.inj.configure(a.cfg, (uint64_t{self_} << 32) | 0x80000000u | h.dst_node, now_ns);
      }
      act = a.inj.decide(abi::fault::kPacket, h.dst_node, now_ns).action;
      if (act == abi::fault::kLinkDown || act == abi::fault::kDelay || act == abi::fault::kCorrupt ||
          a.inj.link_down(h.dst_node, now_ns))
        act = abi::fault::kDrop;
      if (act == abi::fault::kDrop) ++a.dropped;  // and in fabric_fault_drops below
    }
    if (act == abi::fault::kDrop || chance(impair_.loss)) {
      ++ctr_.fault_drops;
      continue;
    }
    if (act == abi::fault::kCorrupt) {
      pkt[sizeof(PacketHeader) / 2] ^= 0x40;  // the MAC will not verify
      ++ctr_.fault_corrupts;
    }
    if (impair_.held.empty() && (act == abi::fault::kDelay || chance(impair_.reorder))) {
      impair_.held.assign(pkt, pkt + len);
      impair_.held_to = tx_addr_[i];
      ++ctr_.fault_delays;
      continue;
    }
    out(pkt, len, tx_addr_[i]);
    if (act == abi::fault::kDup || chance(impair_.dup)) {
      out(pkt, len, tx_addr_[i]);
      ++ctr_.fault_dups;
    }
    if (!impair_.held.empty()) {
      out(impair_.held.data(), impair_.held.size(), impair_.held_to);
      impair_.held.clear();
    }
  }
  tx_count_ = 0;
}

namespace {
// The kernel had no socket buffer for the send: nothing left the host.
bool no_buffer(int e) { return e == EAGAIN || e == EWOULDBLOCK || e == ENOBUFS; }
}  // namespace

// Packets [first, first + count) one datagram each (no GSO).
void UdpFabric::send_plain(size_t first, size_t count) {
  for (size_t i = first; i < first + count; ++i) {
    if (::sendto(fd_, tx_iov_[i].iov_base, tx_iov_[i].iov_len, MSG_DONTWAIT,
                 reinterpret_cast<const sockaddr*>(&tx_addr_[i]), sizeof tx_addr_[i]) ==
        static_cast<ssize_t>(tx_iov_[i].iov_len)) {
      ++ctr_.tx_packets;
      ctr_.tx_bytes.add(tx_iov_[i].iov_len);
    } else if (no_buffer(errno)) {
      refused(i, 1);
    } else if (errno != ECONNREFUSED) {
      ++ctr_.send_errors;
    }
  }
}

void UdpFabric::refused(size_t first, size_t count) {
  // Not a loss: the packets never left. Their records go back to their channels (sent
  // again first, no backoff, no cwnd cut, no silence counted), the acks they carried are
  // owed again, and a probe is due again. An announce is not resent here: its later rounds
  // are its retries.
  const uint64_t now = now_us();
  for (size_t i = first; i < first + count; ++i) {
    ++ctr_.send_deferred;
    Peer* p = tx_peer_[i];
    if (!p) continue;
    const uint8_t* pkt = static_cast<const uint8_t*>(tx_iov_[i].iov_base);
    PacketHeader h;
    std::memcpy(&h, pkt, sizeof h);
    fabric::for_each_record(pkt, h, [&](const RecordHeader& rh, const uint8_t*) {
      if (rh.type == static_cast<uint8_t>(RecordType::kCtl)) p->ch->not_sent(rh.seq, now);
    });
    p->ack_now = true;
    if (p->ch->state() == fabric::ReliableChannel::State::kDown) p->next_probe_us = now;
    mark(*p);
  }
  wait_writable();
}

void UdpFabric::wait_writable() {
  // A UDP socket is writable again once half its send buffer has drained: the kernel's own
  // pacing of this host's sends. One flush then sends what was refused.
  if (wait_write_ || stopped_) return;
  wait_write_ = true;
  sd_.async_wait(asio::posix::stream_descriptor::wait_write, [this](const asio::error_code& e) {
    wait_write_ = false;
    if (!e && !stopped_) flush_all();
  });
}

bool UdpFabric::use_uring_send() {
  auto u = std::make_unique<UringSender>();
  std::string why;
  if (!u->init(fd_, kTxBatch, why)) {
    spdlog::warn("fabric: io_uring send unavailable ({}); using sendmmsg", why);
    return false;
  }
  uring_tx_ = std::move(u);
  const auto at = data_plane_.rfind("sendmmsg");
  if (at != std::string::npos) data_plane_.replace(at, 8, "io_uring sendmsg batches");
  return true;
}

void UdpFabric::send_batch() {
  if (faults_on()) return impaired_send();
  // One sendmmsg entry per run of packets to the same peer that GSO can carry: every packet
  // but the last of the run exactly as long as the first (the kernel cuts at that length).
  size_t nmsg = 0;
  auto& first = tx_first_;
  for (size_t i = 0; i < tx_count_;) {
    const size_t seg = tx_iov_[i].iov_len;
    size_t j = i + 1, bytes = seg;
    // A run is to one peer's channel; packets outside channels (announces) go one by one.
    while (gso_ && tx_peer_[i] && j < tx_count_ && j - i < kGsoMaxSegments && tx_peer_[j] == tx_peer_[i] &&
           tx_iov_[j - 1].iov_len == seg && tx_iov_[j].iov_len <= seg && bytes + tx_iov_[j].iov_len <= kGsoMaxBytes)
      bytes += tx_iov_[j++].iov_len;
    mmsghdr& m = tx_msgs_[nmsg];
    m = mmsghdr{};
    m.msg_hdr.msg_name = &tx_addr_[i];
    m.msg_hdr.msg_namelen = sizeof(sockaddr_in);
    m.msg_hdr.msg_iov = &tx_iov_[i];
    m.msg_hdr.msg_iovlen = j - i;
    if (j - i > 1) {
      m.msg_hdr.msg_control = tx_cmsg_[nmsg].buf;
      m.msg_hdr.msg_controllen = sizeof tx_cmsg_[nmsg].buf;
      cmsghdr* c = CMSG_FIRSTHDR(&m.msg_hdr);
      c->cmsg_level = SOL_UDP;
      c->cmsg_type = UDP_SEGMENT;
      c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
      const uint16_t s16 = static_cast<uint16_t>(seg);
      std::memcpy(CMSG_DATA(c), &s16, sizeof s16);
    }
    tx_segs_[nmsg] = static_cast<uint16_t>(j - i);
    first[nmsg] = i;
    ++nmsg;
    i = j;
  }
  size_t done = 0;
  if (uring_tx_ && !uring_tx_->send(tx_msgs_.data(), nmsg, tx_result_.data())) {
    spdlog::warn("fabric: io_uring send failed; using sendmmsg from now on");
    uring_tx_.reset();
  }
  while (done < nmsg) {
    // Through io_uring every entry has its own result (all are sent by now); else sendmmsg
    // sends a prefix and stops at the first entry that fails.
    int n;
    int e = 0;
    if (uring_tx_) {
      n = tx_result_[done] >= 0 ? 1 : -1;
      e = -tx_result_[done];
    } else {
      n = ::sendmmsg(fd_, tx_msgs_.data() + done, static_cast<unsigned>(nmsg - done), MSG_DONTWAIT);
      e = errno;
    }
    if (n < 0 && no_buffer(e)) {
      // The socket buffer is full: this entry and (through sendmmsg) the rest would be
      // refused alike. All go back to their channels until the socket drains.
      if (uring_tx_) {
        refused(first[done], tx_segs_[done]);
        ++done;
        continue;
      }
      for (; done < nmsg; ++done) refused(first[done], tx_segs_[done]);
      break;
    }
    if (n <= 0) {
      if (n < 0 && tx_segs_[done] > 1 && e != EAGAIN && e != ECONNREFUSED) {
        // A device or kernel that refuses GSO after all: packets one by one from now on.
        spdlog::warn("fabric: UDP GSO send failed ({}); sending packet by packet", std::strerror(e));
        gso_ = false;
        send_plain(first[done], tx_segs_[done]);
      } else if (n < 0 && e != EAGAIN && e != ECONNREFUSED) {
        // A full socket buffer or an unreachable peer: the packets are lost like any other
        // loss; the channels retransmit.
        ++ctr_.send_errors;
      }
      ++done;  // skip the entry that failed, keep the rest
      continue;
    }
    for (int k = 0; k < n; ++k) {
      const size_t m = done + static_cast<size_t>(k);
      ctr_.tx_packets.add(tx_segs_[m]);
      for (size_t i = first[m]; i < first[m] + tx_segs_[m]; ++i) ctr_.tx_bytes.add(tx_iov_[i].iov_len);
    }
    done += static_cast<size_t>(n);
  }
  tx_count_ = 0;
}

void UdpFabric::arm_timer() {
  if (stopped_ || wait_write_) return;  // the writable socket flushes and re-arms
  // Every channel's deadline is current: a channel's state changes only through calls that
  // mark it, and flush_all set the deadline of every marked one.
  const uint64_t next = sched_.next_deadline();
  if (next == UINT64_MAX) return;
  // Re-arming costs a system call: only when the deadline moves earlier. A timer that fires
  // early (the deadline moved later) just flushes and re-arms.
  if (next >= timer_at_) return;
  uint64_t now = now_us();
  timer_at_ = next;
  timer_.expires_after(std::chrono::microseconds(next > now ? next - now : 0));
  timer_.async_wait([this](const asio::error_code& e) {
    if (e || stopped_) return;
    timer_at_ = UINT64_MAX;
    flush_all();
  });
}

void UdpFabric::fold(Peer& p) {
  // A channel's counters only grow (reset() keeps them), and a channel counts only in calls
  // that mark it: adding each flushed channel's growth keeps the sums exact.
  const auto& s = p.ch->stats();
  Folded& f = p.folded;
  sums_.duplicates += s.duplicates - f.duplicates;
  sums_.out_of_window += s.out_of_window - f.out_of_window;
  sums_.retransmits += s.retransmits - f.retransmits;
  sums_.downs += s.downs - f.downs;
  sums_.messages_abandoned += s.messages_abandoned - f.messages_abandoned;
  f = {s.duplicates, s.out_of_window, s.retransmits, s.downs, s.messages_abandoned};
}

void UdpFabric::publish() {
  // Sums over channels that are never removed: the counters never go backwards.
  ctr_.duplicates.set(sums_.duplicates);
  ctr_.out_of_window.set(sums_.out_of_window);
  ctr_.retransmits.set(sums_.retransmits);
  ctr_.peer_downs.set(sums_.downs);
  ctr_.messages_abandoned.set(sums_.messages_abandoned);
}

nlohmann::json UdpFabric::status() const {
  nlohmann::json peers = nlohmann::json::array();
  for (const auto& [nic, p] : peers_) {
    const auto& s = p.ch->stats();
    peers.push_back({{"nic_addr", nic},
                     {"endpoint", endpoint_text(p.addr)},
                     {"state", fabric::ReliableChannel::kStateNames[static_cast<int>(p.ch->state())]},
                     {"epoch", p.epoch},
                     {"queued_records", p.ch->queued()},
                     {"messages_sent", s.messages_sent},
                     {"messages_received", s.messages_received},
                     {"retransmits", s.retransmits},
                     {"fast_retransmits", s.fast_retransmits},
                     {"timeouts", s.timeouts},
                     {"recoveries", s.recoveries},
                     {"delay_backoffs", s.delay_backoffs},
                     {"undos", s.undos},
                     {"delay_suspends", s.delay_suspends},
                     {"cwnd_bytes", p.ch->cwnd_bytes()},
                     {"srtt_us", p.ch->srtt_us()},
                     {"min_rtt_us", p.ch->min_rtt_us() == UINT64_MAX ? 0 : p.ch->min_rtt_us()},
                     {"duplicates", s.duplicates},
                     {"retransmits_deferred", s.deferred},
                     {"messages_abandoned", s.messages_abandoned},
                     {"resident_bytes", p.ch->resident_bytes()},
                     {"memory_releases", s.releases}});
  }
  nlohmann::json announces = nlohmann::json::object();
  for (const auto& [nic, a] : announce_faults_) announces[std::to_string(nic)] = a.dropped;
  const fabric::LoadStats& ls = load_.stats();
  nlohmann::json load = {{"channels_late", load_.late()},
                         {"channels_slow", load_.slow()},
                         {"most_late", ls.most_late},
                         {"overloaded", overloaded_},
                         {"overload_episodes", ls.overload_episodes},
                         {"overloaded_us", ls.overloaded_us},
                         {"retransmit_budget_per_s", load_.rate_per_s()},
                         {"timer_retransmits_granted", ls.retransmits_granted},
                         {"timer_retransmits_deferred", ls.retransmits_deferred}};
  return {{"port", port_},
          {"epoch", epoch_},
          {"load", load},
          {"data_plane", data_plane_},
          {"mac", fabric::mac_alg_name(auth_.alg())},
          {"nodes_in_map", map_.nodes().size()},
          {"peers", peers},
          {"announces_dropped", announces}};
}

}  // namespace nicemu::daemon
