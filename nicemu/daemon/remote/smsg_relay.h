// SMSG across hosts (docs/fabric.md, "SMSG across hosts"): the daemon's half of a channel
// whose sender and receiver are on different hosts. Same-host SMSG needs no daemon (the
// sender stores into the receiver's mailbox); across hosts the sender's daemon relays.
//
// Sender's daemon (a "tx" relay, one per sender CDM, peer and mailbox):
//  - GNI_SmsgInit towards a node of another host asks for a relay (ctl::SmsgRelayOpen): a
//    SmsgRelayCtl block in the sender's own heap (shm_layout.h) through which the library
//    sees credits (`released`) and failure (`state`) without calls. No round trip to the
//    peer: the sender already has the receiver's mailbox attributes.
//  - each message comes as a ctl::SmsgRelaySend record of the CDM's relay ring
//    (abi/relay_ring.h; drain(), doorbell(), nap_tick()) and goes on
//    over the fabric as ctl::SmsgData, after one ctl::SmsgOpen naming the mailbox (the
//    reliable channel keeps them in order);
//  - ctl::SmsgAck from the receiver's daemon says how many messages are in the mailbox
//    (their local completion CQEs, msg_id, are pushed into the sender's CQ then) and how
//    many the receiver released (copied into the block: credits come back);
//  - failure is final and reported, never a hang: a negative ack (receiver gone, mailbox
//    refused, relay unknown after a restart), the fabric losing the channel (peer silent
//    past the retry budget, or restarted: peer_lost) or an ack older than kAckDeadline mark
//    the block failed and complete every message not yet delivered with an error CQE;
//    later sends fail in the library.
//  Messages the fabric refuses for a full backlog wait in a per-node queue, in order.
//
// Receiver's daemon (an "rx" relay, keyed by (sending node, relay)):
//  - SmsgOpen is checked like a kMboxOpen (a live CDM of that credential and instance, a
//    real registration of it covering the mailbox, sizes) and opens the same mailbox the
//    receiver's own GNI_SmsgInit opens;
//  - each SmsgData is checked (known relay, length, next in sequence, inside the credits
//    the mailbox has free) before it is written with the channel state machine
//    (abi/smsg_channel.h: smsg_write_at, duplicates dropped by smsg_seen), then the
//    remote CQE (the sender EP's remote event data) goes into the receiver's CQ;
//  - acks are coalesced: one per relay per turn of the loop, after the messages that
//    caused them, and for every relay whose receiver released something whenever any
//    message comes from its sending node, and when the receiver's library notes that it
//    released an eighth of the mailbox (MboxCtl::note_at). Releases without traffic are
//    also noticed by a poll, but only of relays whose sender is short of credits (a quarter
//    or less left: it may soon wait), on an adaptive timer (every 100 µs while releases
//    came in the last 2 ms, then doubling to 5 ms while nothing moves). The other relays
//    are never polled: their senders have credits to spare and can only become short by
//    sending, whose acks carry the releases (and make the relay short if it is); a note or
//    any message between the two nodes reports them sooner. So idle relays (a daemon of a
//    128-host all-to-all holds ~500 with a message delivered) cost no timer and no reads,
//    and a note looks only at its CDM's relays. Senders' liveness is checked every 10 ms, not at every poll,
//    and only over the tx relays with messages in flight (kept in a set of their own);
//    GNI_SmsgInit finds a re-opened relay through an index by CDM and peer, so neither
//    costs what all of a daemon's relays cost.
// Single-threaded: every call comes from the daemon's loop.
#pragma once
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>
#include <nlohmann/json_fwd.hpp>

#include "nicemu/abi/ctl_protocol.h"
#include "nicemu/abi/daemon_protocol.h"
#include "nicemu/daemon/cdm/cdm_region.h"
#include "nicemu/daemon/fabric_port.h"
#include "nicemu/daemon/stats_page.h"

namespace nicemu::daemon {

// What the relay needs from the node.
struct SmsgRelayEnv {
  std::function<CdmRegion*(uint64_t attach_id)> cdm;                      // live or not
  // The live CDM of a memory domain (the MDH of its mailbox's handle) in a protection domain.
  std::function<CdmRegion*(const Credential&, uint32_t mem_domain)> find_domain;
  std::function<bool(CdmRegion&)> may_open_mailbox;                      // resource limits
  std::function<bool(uint32_t node)> remote;                             // reached over the fabric
  FabricSend send;                                                       // over the fabric
  std::function<bool(uint32_t node)> peer_up;                            // its channel is up
  // Whether RMA pieces of CDM `attach_id` to `node` wait to be sent (RemoteRequester::unsent):
  // its later messages wait behind them.
  std::function<bool(uint64_t attach_id, uint32_t node)> rma_unsent;
  // Whether the fabric holds its channels up longer because this host is starved
  // (fabric_load.h): acks come late then, the ack deadline stretches alike. Empty: never.
  std::function<bool()> fabric_overloaded;
};

class SmsgRelay : public FabricService {
  using Clock = std::chrono::steady_clock;

 public:
  // An ack not received this long after its message was handed to the fabric means the
  // message was lost with a channel reset (peer restarted): the relay fails.
  static constexpr std::chrono::milliseconds kAckDeadline{5000};
  // The same while the fabric is overloaded: its channels' horizon then (LoadConfig).
  static constexpr std::chrono::milliseconds kAckDeadlineOverloaded{20000};
  // Relays one CDM may open (each holds daemon memory and a block of its heap); beyond,
  // GNI_SmsgInit to another host returns GNI_RC_ERROR_RESOURCE.
  static constexpr size_t kMaxRelaysPerCdm = 16384;

  SmsgRelay(uint32_t self, StatsPage& stats, SmsgRelayEnv env);
  SmsgRelay(const SmsgRelay&) = delete;
  SmsgRelay& operator=(const SmsgRelay&) = delete;

  // Timers run on `io` (the fabric's loop); before start nothing can cross hosts anyway.
  void start(asio::io_context& io);
  void stop();

  // Library side, on the attach connection of `cdm`. open returns a gni_return_t value;
  // send returns false for a malformed message (the caller counts it).
  int open(CdmRegion& cdm, const abi::ctl::SmsgRelayOpen& req, abi::ctl::SmsgRelayOpenReply& rep);
  bool send(CdmRegion& cdm, const char* msg, size_t len, Clock::time_point now = Clock::now());  // now: for the ack deadline
  // The daemon took a RemotePost of `cdm` (CdmRegion::remote_posts_taken): a message of its
  // ring that waited for it goes on now.
  void posts_taken(CdmRegion& cdm) {
    if (held_rings_) resume_held(cdm);
  }
  // The library says `cdm` released relayed messages: their senders get credits now.
  void released(CdmRegion& cdm);
  // The library rang the doorbell of `cdm`'s relay ring (abi/relay_ring.h): its messages
  // are taken now. A doorbell soon after the previous one (within kStreaming) means the
  // library is streaming: the ring is drained again every kNap while each drain finds
  // several messages, before the doorbell is armed again. Otherwise (one message now and
  // then, a ping-pong) the doorbell is armed again at once. The price: a ping-pong whose
  // round trip is shorter than kStreaming can have a message wait up to kNap once before
  // the relay sees it is not a stream (on these VMs a round trip across hosts is over
  // 100 µs, and a streaming library rings every 20-30 µs).
  void doorbell(CdmRegion& cdm);
  static constexpr std::chrono::microseconds kNap{50}, kStreaming{50};

  // A daemon-to-daemon message from `from` (ops kSmsgOpen .. kSmsgClose). nullptr if
  // accepted, else why it is malformed (the caller counts and logs it).
  const char* fabric_message(uint32_t from, const abi::ctl::Header& h, const char* msg, size_t len);
  const char* receive(uint32_t from, const abi::ctl::Header& h, const uint8_t* msg, size_t len) override {
    return fabric_message(from, h, reinterpret_cast<const char*>(msg), len);
  }

  // The fabric lost what it had queued for `node` (channel down after the retry budget, or
  // the peer restarted): relays to it fail now. progress(): the fabric is about to flush,
  // messages waiting for backlog room go first.
  void peer_lost(uint32_t node) override;
  void progress() override;
  // RMA pieces to `node` that waited have all gone out: messages queued behind them go now.
  void rma_sent(uint32_t node) {
    if (queued_.count(node)) drain_queue(node);
  }

  // The CDM detached or died: its tx relays are closed at their peers, its rx relays
  // answered with a failure so their senders learn at once.
  void cdm_gone(uint64_t attach_id);

  nlohmann::json status() const;

 private:
  struct Pending {
    uint32_t seq, msg_id, src_cq;
    std::chrono::steady_clock::time_point at;
  };
  struct Tx {
    uint32_t id = 0;
    uint64_t attach_id = 0;
    uint32_t inst = 0;
    Credential cred;
    abi::ctl::SmsgRelayOpen attrs{};  // as asked (the key of a re-open)
    uint64_t ctl_offset = 0;          // SmsgRelayCtl in the sender's heap
    uint32_t next_seq = 0;            // next sequence number expected from the library
    uint32_t delivered = 0;
    uint32_t released = 0;
    bool opened = false;              // SmsgOpen sent
    uint32_t failed = 0;              // cqe status once failed
    std::deque<Pending> unacked;
  };
  struct Rx {
    uint64_t attach_id = 0;           // receiver CDM
    uint32_t to_inst = 0;
    uint32_t from_inst = 0;
    uint64_t mbox_offset = 0, mbox_bytes = 0;
    uint32_t credits = 0, slot_size = 0, max_size = 0;
    uint32_t dst_cq = 0;
    uint32_t base = 0;                // mailbox sequence number of the relay's message 0
    uint32_t next = 0;                // next relay sequence number expected
    uint32_t reported = 0;            // releases last reported to the sender
    uint32_t released_seen = 0;       // the mailbox's `released` as last read (it only grows)
    uint32_t status = 0;              // != 0: refused / receiver gone; every message gets it back
  };
  using RxKey = std::pair<uint32_t, uint32_t>;  // (sending node, relay)
  struct Ring {                  // a CDM's relay ring
    uint64_t offset = 0;         // RelayRingCtl in its heap
    uint64_t head = 0;           // our own copy: the shared one is only published
    bool napping = false;        // drained lately: the doorbell stays disarmed
    bool broken = false;         // the library wrote nonsense: nothing more is read
    bool held = false;           // the next message waits for the CDM's earlier RemotePosts
    std::chrono::steady_clock::time_point last_bell{};
  };
  void arm_ring(CdmRegion& cdm, Ring& r);
  std::optional<uint64_t> ring_for(CdmRegion& cdm);
  size_t drain(CdmRegion& cdm, Ring& r);
  void resume_held(CdmRegion& cdm);
  void nap_tick();
  void schedule_nap();

  abi::SmsgRelayCtl* block(const Tx& t) const;
  void to_peer(uint32_t node, const void* msg, size_t len, uint64_t attach_id = 0);
  bool behind_rma(uint64_t attach_id, uint32_t node) const {
    return attach_id && env_.rma_unsent && env_.rma_unsent(attach_id, node);
  }
  void drain_queue(uint32_t node);
  void peer_down(uint32_t node);
  void fail(Tx& t, uint32_t status, const std::string& why);
  void on_ack(uint32_t from, const abi::ctl::SmsgAck& a);
  const char* on_open(uint32_t from, const abi::ctl::SmsgOpen& o);
  const char* on_data(uint32_t from, const char* msg, size_t len);
  void send_ack(const RxKey& k, Rx& r);
  bool released_moved(const RxKey& k) const;  // the receiver released since the last report
  void move_note(const RxKey& k, const Rx& r, abi::MboxCtl& m);  // MboxCtl::note_at past `reported`
  void nack(uint32_t node, uint32_t relay, uint32_t status);
  void ack_soon(const RxKey& k);
  void ack_released_of(uint32_t node);  // ack_soon every relay from `node` whose receiver released
  void flush_acks();
  void tick();
  void arm(std::chrono::microseconds in);
  void unwatch(const RxKey& k);  // out of watch_ and short_
  bool check_liveness(Clock::time_point now);  // true: a sender has messages in flight

  uint32_t self_;
  SmsgRelayEnv env_;
  Counter sent_, delivered_, credit_updates_, failures_, mbox_opens_;
  asio::io_context* io_ = nullptr;
  std::optional<asio::steady_timer> timer_;
  std::chrono::steady_clock::time_point timer_at_ = std::chrono::steady_clock::time_point::max();
  uint64_t timer_gen_ = 0;
  std::chrono::microseconds poll_{100};
  Clock::time_point last_move_{};   // last time a watched receiver released something
  Clock::time_point last_liveness_{};  // the last liveness check
  bool in_flight_ = false;          // as of the last liveness check
  bool flush_posted_ = false;

  std::map<uint32_t, Tx> tx_;
  uint32_t next_tx_;
  // tx relays not failed with messages not yet acknowledged (check_liveness walks these).
  std::set<uint32_t> in_flight_tx_;
  void note_in_flight(const Tx& t) {
    if (!t.failed && !t.unacked.empty())
      in_flight_tx_.insert(t.id);
    else
      in_flight_tx_.erase(t.id);
  }
  // tx relays by (CDM, peer node, peer instance): open() looks for a re-opened one there.
  using TxPeerKey = std::tuple<uint64_t, uint32_t, uint32_t>;
  std::multimap<TxPeerKey, uint32_t> tx_by_peer_;
  std::map<uint64_t, size_t> tx_per_cdm_;  // attach id -> its tx relays (failed ones too)
  std::map<RxKey, Rx> rx_;
  std::set<RxKey> ack_due_;                                 // rx relays owing an ack this turn
  std::map<RxKey, uint64_t> watch_;                         // rx relays with messages not reported released -> receiver
  std::set<std::pair<uint64_t, RxKey>> watch_by_cdm_;       // watch_ by receiver (a note looks at its own)
  std::set<RxKey> short_;                                   // those whose sender is short of credits
  struct Queued {
    uint64_t attach_id;  // the sending CDM's, 0 for the relay's own messages
    std::vector<char> bytes;
  };
  // node -> messages the fabric refused, or behind RMA pieces of their CDM not yet sent
  std::map<uint32_t, std::deque<Queued>> queued_;
  std::map<uint64_t, Ring> rings_;                          // attach id -> its relay ring
  std::optional<asio::steady_timer> nap_timer_;
  bool nap_armed_ = false;
  uint64_t ring_messages_ = 0, ring_malformed_ = 0, doorbells_ = 0, release_notes_ = 0;
  uint64_t held_ = 0;        // messages that waited for their CDM's earlier RemotePosts
  size_t held_rings_ = 0;    // rings with Ring::held set
  std::vector<char> ring_buf_;                              // the record being handled
  std::vector<char> buf_;                                   // message being built
  // CQEs pushed as a batch (one tail reservation, one wake per CQ, fewer cross-core misses
  // on lines the rank is polling): the remote events of a receive turn, before its acks;
  // the local completions of one ack.
  struct CqeBatch {
    uint64_t attach_id = 0;
    uint32_t cq = 0;
    std::vector<uint64_t> entries;
  };
  CqeBatch rx_cqes_, tx_cqes_;
  void queue_cqe(CqeBatch& b, uint64_t attach_id, uint32_t cq, uint64_t entry);
  void flush_cqes(CqeBatch& b);
};

}  // namespace nicemu::daemon
