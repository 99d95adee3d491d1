// The daemon's UDP transport to the daemons of other hosts: one socket, one reliable channel
// per peer NIC address (nicemu/fabric/reliable_channel.h), every packet authenticated with
// an AEAD tag under this daemon's subkey of the cluster key, nonce a packet number counted
// per epoch (packet_codec.h), peers named by the fabric map (fabric_map.h).
//
// Data plane: packets arrive through io_uring (one multishot recvmsg over a ring of provided
// buffers, uring_receiver.h) whose completion eventfd the daemon's Asio loop (epoll) watches;
// where the kernel cannot, the non-blocking socket itself is watched and drained in batches
// with recvmmsg into buffers allocated once. Either way an idle daemon sleeps. After a
// batch the channels with work are flushed: those a packet came from or a message was
// queued to, and those whose deadline came (peer_schedule.h; the others are not touched, so
// a flush costs what the busy peers cost, not what all peers cost). A channel's due records
// (new, retransmitted) and its acknowledgement are coalesced into as few packets as fit and
// sent with one sendmmsg, or one io_uring submission (use_uring_send, uring_sender.h). A
// timer, armed for the earliest deadline of any channel, wakes the loop for
// retransmissions and probes of silent peers. The node's counters summed over channels are
// kept up to date from the channels flushed. No allocation per packet.
//
// Epochs: each daemon draws a random epoch at start. A packet from a peer with a new epoch
// means the peer restarted: its channel is reset (queued messages abandoned, counted) and
// the new epoch adopted; packets carrying one of the peer's earlier epochs are stale and
// dropped. A packet addressed to an earlier epoch of ours gets only an ack back (so the
// peer learns our epoch), its records are dropped. At start a daemon announces its epoch to
// every node of the map (header-only packets, kFlagAnnounce, sent kAnnounceRounds times since
// UDP may drop them): peers that knew an earlier epoch start over then, not when a new job's
// first message runs into the stale channel; peers that knew nothing of it make no channel.
#pragma once
#include <netinet/in.h>
#include <sys/socket.h>

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <vector>

#include <asio.hpp>
#include <nlohmann/json_fwd.hpp>

#include "nicemu/abi/wire_protocol.h"
#include "nicemu/daemon/stats_page.h"
#include "nicemu/daemon/transport/uring_receiver.h"
#include "nicemu/daemon/transport/uring_sender.h"
#include "nicemu/fabric/fabric_map.h"
#include "nicemu/fabric/packet_codec.h"
#include "nicemu/fabric/peer_schedule.h"
#include "nicemu/fabric/reliable_channel.h"
#include "nicemu/fault/fault_injector.h"

namespace nicemu::daemon {

class UdpFabric {
 public:
  // A complete message from the daemon of `from_nic` (authenticated, in order, once).
  using Deliver = std::function<void(uint32_t from_nic, const uint8_t* msg, size_t len)>;

  // Binds the port of `self` in `map`; throws std::runtime_error on failure (also when
  // `mac` is aes256gcm and the CPU lacks AES-NI). `mac`: the AEAD that seals this daemon's
  // packets (nullopt: the best the CPU has); any peer's supported algorithm is accepted.
  UdpFabric(asio::io_context& io, uint32_t self, fabric::FabricMap map, const uint8_t (&key)[abi::wire::kKeyBytes],
            StatsPage& stats, Deliver deliver, bool use_uring = true,
            std::optional<abi::wire::MacAlg> mac = std::nullopt, fabric::ChannelConfig ccfg = {});
  ~UdpFabric();
  UdpFabric(const UdpFabric&) = delete;
  UdpFabric& operator=(const UdpFabric&) = delete;

  // Starts receiving and announces this daemon's epoch to the nodes of the map.
  void start();
  void stop();
  // Sends through io_uring (uring_sender.h) instead of sendmmsg; false (and sendmmsg kept)
  // where the kernel cannot.
  bool use_uring_send();
  // Whether `nic` is reachable through the fabric (in the map, not this node).
  bool has(uint32_t nic) const { return nic != self_ && map_.find(nic) != nullptr; }
  const fabric::FabricMap& map() const { return map_; }
  // Queues a message for the daemon of `nic`; false at once if the peer is down (silent
  // past the retry budget), the message too long or the peer's backlog full.
  bool send(uint32_t nic, const void* msg, size_t len);
  bool peer_up(uint32_t nic) const;
  // Overloaded as of the last flush: the channels' horizon is stretched (fabric_load.h).
  bool overloaded() const { return overloaded_; }
  uint64_t epoch() const { return epoch_; }
  // The daemon's fault configuration (docs/fault-injection.md): its `packet` rules drop,
  // duplicate, delay, corrupt or cut the link for packets this transport sends, decided per
  // peer by a seeded injector. Null: none.
  void set_fault_config(const abi::fault::Config* cfg) { fault_cfg_ = cfg; }
  uint16_t port() const { return port_; }
  asio::io_context& io() { return io_; }  // the loop it runs on
  nlohmann::json status() const;
  // Called (from the loop, never inside a send) when a peer's channel goes down after the
  // retry budget or the peer restarts: what was sent to it is lost.
  void on_peer_lost(std::function<void(uint32_t nic)> f) { peer_lost_ = std::move(f); }
  // Called before every flush (after each receive batch, timer or queued flush): senders
  // that were refused for backlog room queue more then.
  void on_progress(std::function<void()> f) { progress_ = std::move(f); }
  // Runs the progress hook (and a flush) in `us` microseconds even if nothing arrives: for
  // work that waits on something other than the network (a full MSGQ ring).
  void progress_in(uint64_t us);

 private:
  // A channel's counters as last added into the node's sums (fold()).
  struct Folded {
    uint64_t duplicates = 0, out_of_window = 0, retransmits = 0, downs = 0, messages_abandoned = 0;
  };
  struct Peer {
    uint32_t nic = 0;
    uint32_t slot = 0;                   // its slot in sched_ and slots_
    sockaddr_in addr{};
    uint64_t epoch = 0;                  // 0 until heard from
    std::array<uint64_t, 4> retired{};   // its earlier epochs: packets with them are stale
    uint64_t last_heard_us = 0;
    uint64_t next_probe_us = 0;
    bool ack_now = false;                // an ack is owed regardless of records
    fault::Injector inj;                 // packet faults towards this peer
    abi::fault::Config inj_cfg{};        // the configuration `inj` was made from
    Folded folded;
    std::unique_ptr<fabric::ReliableChannel> ch;
  };
  static constexpr size_t kBatch = 32;
  // Packets queued for one flush: a full channel window to one peer fits twice.
  static constexpr size_t kTxBatch = 128;
  // A UDP GSO send (one system call, one pass through the stack, cut into packets by the
  // kernel or the device): at most this many packets and bytes.
  static constexpr size_t kGsoMaxSegments = 64;
  static constexpr size_t kGsoMaxBytes = 65000;

  Peer* peer(uint32_t nic);
  void arm_read();
  void on_readable();
  void arm_uring();
  void on_uring();
  void receive_one(const uint8_t* p, size_t n, const sockaddr_in& from);
  // A datagram as the socket gave it: with UDP GRO possibly several packets of one sender,
  // each `segment` bytes (the last possibly shorter).
  void receive_datagram(const uint8_t* p, size_t n, const sockaddr_in& from, bool truncated, size_t segment);
  void flush_all();
  void flush(Peer& p, uint64_t now);
  void queue_packet(Peer& p, uint8_t flags, const uint8_t* records, size_t rec_bytes, uint16_t count);
  // Seals header `h` (packet number, length and MAC filled in here) with `rec_bytes` of
  // records into the send batch, to `to`; `p`: the peer's state (fault injection, GSO
  // runs), null for a packet outside any channel (an announce).
  void queue_sealed(abi::wire::PacketHeader& h, const uint8_t* records, size_t rec_bytes, const sockaddr_in& to, Peer* p);
  // One round of epoch announces (kFlagAnnounce) to every other node of the map; the next
  // round on a timer, kAnnounceRounds in all, each interval doubled.
  void announce();
  static constexpr int kAnnounceRounds = 5;
  static constexpr uint64_t kAnnounceFirstGapUs = 50000;
  void send_batch();
  void arm_timer();
  // Something happened to `p` that its next flush acts on.
  void mark(Peer& p) { sched_.mark(p.slot); }
  // Adds what `p`'s channel counted since its last fold into the node's sums.
  void fold(Peer& p);
  void publish();
  static uint64_t now_us();

  asio::io_context& io_;
  uint32_t self_;
  fabric::FabricMap map_;
  fabric::PacketAuth auth_;
  StatsPage& stats_;
  Deliver deliver_;
  std::function<void(uint32_t)> peer_lost_;
  std::function<void()> progress_;
  void lost(uint32_t nic);
  fabric::ChannelConfig ccfg_;
  uint64_t epoch_ = 0;
  // The AEAD nonce of the next packet sent: from 1, never reused within epoch_ (a restart
  // draws a new epoch, hence a new subkey; packet_codec.h).
  uint64_t next_packet_number_ = 1;
  uint16_t port_ = 0;
  int fd_ = -1;
  asio::posix::stream_descriptor sd_;
  std::unique_ptr<UringReceiver> uring_;   // null: recvmmsg fallback
  std::unique_ptr<UringSender> uring_tx_;  // null: sendmmsg
  std::array<int, kTxBatch> tx_result_{};
  asio::posix::stream_descriptor uring_sd_;  // its completion eventfd
  std::string data_plane_;
  asio::steady_timer timer_;
  asio::steady_timer progress_timer_;
  asio::steady_timer announce_timer_;
  int announce_round_ = 0;
  bool progress_armed_ = false;
  bool stopped_ = false;
  bool in_rx_ = false;
  bool flush_posted_ = false;               // a flush is queued on the loop
  uint64_t timer_at_ = UINT64_MAX;          // when the armed timer fires (UINT64_MAX: none)
  // Every channel's late/answering state and the timer retransmission budget
  // (fabric_load.h); declared before peers_, whose channels report to it until destroyed.
  fabric::FabricLoad load_;
  bool overloaded_ = false;  // as last logged
  std::map<uint32_t, Peer> peers_;
  std::vector<Peer*> slots_;              // peers by slot, in the order they were made
  fabric::PeerSchedule sched_;            // peers with work (marked) or a deadline
  std::vector<uint32_t> flushing_;        // the slots of the flush running
  Folded sums_;                           // every channel's counters, added up by fold()

  struct GsoCmsgInt {
    alignas(cmsghdr) char buf[CMSG_SPACE(sizeof(int))];
  };
  // Receive and send buffers, allocated once.
  std::vector<uint8_t> rx_buf_, tx_buf_;
  std::array<mmsghdr, kBatch> rx_msgs_{};
  std::array<GsoCmsgInt, kBatch> rx_cmsg_{};
  bool gro_ = false;       // the socket coalesces a sender's packets (UDP_GRO)
  size_t rx_slot_ = 0;     // receive buffer per datagram: kMaxPacket, or 64 KiB with GRO
  std::array<iovec, kBatch> rx_iov_{};
  std::array<sockaddr_in, kBatch> rx_addr_{};
  std::array<mmsghdr, kTxBatch> tx_msgs_{};
  std::array<iovec, kTxBatch> tx_iov_{};
  std::array<sockaddr_in, kTxBatch> tx_addr_{};
  std::array<Peer*, kTxBatch> tx_peer_{};
  std::array<uint16_t, kTxBatch> tx_segs_{};  // packets in each sendmmsg entry
  std::array<size_t, kTxBatch> tx_first_{};   // first packet of each sendmmsg entry
  struct GsoCmsg {
    alignas(cmsghdr) char buf[CMSG_SPACE(sizeof(uint16_t))];
  };
  std::array<GsoCmsg, kTxBatch> tx_cmsg_{};
  size_t tx_count_ = 0;
  bool gso_ = false;  // the kernel takes UDP_SEGMENT: runs of packets to one peer go as one send
  void send_plain(size_t first, size_t count);
  // The kernel refused packets [first, first + count) (no socket buffer): their records are
  // handed back to their channels to be sent again, acks are owed again, and the loop
  // flushes once the socket is writable.
  void refused(size_t first, size_t count);
  void wait_writable();
  bool wait_write_ = false;  // a flush is waiting for the socket to drain
  std::vector<uint8_t> scratch_;  // records of the packet being built

  // Test-only impairment of outgoing packets (NICEMU_FABRIC_IMPAIR="loss=P,dup=P,
  // reorder=P,seed=N"), for machines without tc netem. Deterministic by seed. To be folded
  // into the fault injector.
  struct Impair {
    bool on = false;
    double loss = 0, dup = 0, reorder = 0;
    std::mt19937_64 rng;
    std::vector<uint8_t> held;  // a packet held back to go after the next one (reorder)
    sockaddr_in held_to{};
  } impair_;
  const abi::fault::Config* fault_cfg_ = nullptr;
  // Fault decisions for the epoch announces to each node (impaired_send).
  struct AnnounceFaults {
    abi::fault::Config cfg{};
    fault::Injector inj;
    uint64_t dropped = 0;  // announces to this node dropped (status: "announces_dropped")
  };
  std::map<uint32_t, AnnounceFaults> announce_faults_;
  void impaired_send();
  bool faults_on() const { return impair_.on || (fault_cfg_ && fault_cfg_->enabled); }

  struct Ctr {
    Counter rx_packets, tx_packets, rx_bytes, tx_bytes, short_or_bad_length, bad_magic, bad_version, bad_mac,
        bad_records, unknown_source, stale_epoch, peer_restarts, duplicates, out_of_window, retransmits,
        peer_downs, send_refused, messages_abandoned, send_errors, fault_drops, fault_dups, fault_delays, fault_corrupts,
        send_deferred;
  } ctr_;
};

}  // namespace nicemu::daemon
