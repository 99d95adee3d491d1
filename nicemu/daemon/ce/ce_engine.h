// The collective engine of one emulated Aries NIC (docs/collective-engine.md): its virtual
// CE channels, the trees the job configures over them, and the reductions in progress.
// Leaves post operands (one-way CePost from their library); a channel folds the operands
// of its children (in child-index order, with ce_alu) once all are in, sends the partial
// result to its parent channel, and the root's result travels back down the same edges
// to every leaf, which gets it written into its gni_ce_result_t and a CQ event. Members
// that die and nodes that go silent are found by probing what a reduction waits for, and
// become error results within a second. Single-threaded: every call comes from the
// daemon's Asio loop; messages to other nodes' daemons go out through `send`.
#pragma once
#include <sys/types.h>

#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>
#include <nlohmann/json_fwd.hpp>

#include "nicemu/abi/ce_ops.h"
#include "nicemu/ce/ce_alu.h"
#include "nicemu/daemon/cdm/cdm_region.h"
#include "nicemu/daemon/fabric_port.h"

namespace nicemu::daemon {

struct CeEnv {
  // One daemon-to-daemon message to the daemon of `node` (links or fabric); false if it
  // cannot be sent (no such node, its daemon or host gone).
  FabricSend send;
  // The live CDM of an attach id, or nullptr.
  std::function<CdmRegion*(uint64_t attach_id)> cdm;
};

class CeEngine : public FabricService {
 public:
  // Ticks of the liveness timer (tick()); a dependency waited for longer than kProbeAfter
  // ticks is probed every kProbeEvery ticks and fails kProbeTimeout ticks after a probe went
  // unanswered: with 100 ms ticks, a death is an error completion within a second.
  static constexpr uint32_t kTickMs = 100;
  static constexpr uint32_t kProbeAfter = 2, kProbeEvery = 2, kProbeTimeout = 5;

  CeEngine(uint32_t self, CeEnv env) : self_(self), env_(std::move(env)) {}

  // Library requests on the attach connection of `owner`; gni_return_t values.
  int create(CdmRegion& owner, uint32_t& ce_id);
  int configure(CdmRegion& owner, const abi::ce::CeConfigure& req);
  int destroy(CdmRegion& owner, uint32_t ce_id);
  // A leaf's operand (one-way); refusals come back as error results.
  void post(CdmRegion& leaf, const abi::ce::CePost& p);
  // The post page of the job of `leaf` on this node (abi/ce_ops.h, PostPage), created on
  // first use, and the leaf's slot in it; `fd` is the page's memfd (the engine keeps it).
  // gni_return_t: ERROR_RESOURCE when the page has no free slot (the leaf sends CePosts).
  int open_page(CdmRegion& leaf, uint32_t& slot, int& fd);
  // CeRing: a leaf's post completed its channel's local posts. Takes what the pages hold.
  void ring();
  // A leaf EP of `leaf` names its channel (one-way): remembered until the CDM goes away,
  // when that channel is told (CeLeafGone).
  void member(CdmRegion& leaf, const abi::ce::CeMember& m);
  // A daemon-to-daemon message from the daemon of `from`; nullptr if taken, else why it was
  // dropped (malformed, or naming another sender).
  const char* message(uint32_t from, const abi::ctl::Header& h, const char* msg, size_t len);
  const char* receive(uint32_t from, const abi::ctl::Header& h, const uint8_t* msg, size_t len) override {
    return message(from, h, reinterpret_cast<const char*>(msg), len);
  }
  // The CDM went away: its channels are destroyed (their pending reductions fail), its
  // leaves' results are dropped, and reductions waiting for it here fail at once.
  void cdm_gone(uint64_t attach_id);
  // The liveness timer: probes what pending reductions wait for and fails the dead.
  // start() runs it every kTickMs on `io` (it does nothing while nothing is pending).
  void tick();
  void start(asio::io_context& io);
  void stop();
  bool busy() const { return !leaves_.empty() || pending_rounds_ > 0; }
  // Takes every new post of the post pages (done before every other CE event, so that a
  // leaf's posts are taken in the order it made them, whichever way they came).
  void scan();
  nlohmann::json status() const;

 private:
  struct Contribution {
    uint32_t to_ce = 0, child_id = 0, kind = 0, from_ce = 0;
    uint32_t reply_node = 0;
    uint64_t token = 0;
    Credential cred;
    uint32_t cmd = 0, mode = 0, status = 0;
    uint64_t red_id = 0;
    ce::Operand op;
    uint64_t origin_attach = 0;
  };
  struct Result {
    uint64_t token = 0;
    uint32_t status = 0;
    uint64_t red_id = 0;
    ce::Operand op;
  };
  struct Round {
    std::array<Contribution, abi::ce::kMaxChildren> slots{};
    uint32_t filled = 0;     // bit per child slot
    bool sent_up = false;    // complete, partial result at the parent, waiting for its result
    uint64_t since = 0;      // tick it started waiting on its current dependencies
  };
  struct Channel {
    uint32_t id = 0;
    uint64_t owner = 0;        // attach id
    Credential cred;
    bool configured = false;
    uint32_t modes = 0;
    ce::Rounding rounding = ce::Rounding::kNear;
    uint32_t cq = 0;
    bool has_parent = false;
    abi::ce::Edge parent{};
    std::array<abi::ce::Edge, abi::ce::kMaxChildren> children{};
    uint32_t child_mask = 0;
    // Who last contributed in each slot (a leaf's CDM), so a dead one can be told.
    std::array<uint64_t, abi::ce::kMaxChildren> last_attach{};
    std::array<uint32_t, abi::ce::kMaxChildren> last_node{};
    // Slots whose leaf is known gone (CeLeafGone) and nobody has posted in since.
    std::array<uint64_t, abi::ce::kMaxChildren> gone_attach{};
    std::array<uint32_t, abi::ce::kMaxChildren> gone_node{};
    std::deque<Round> rounds;
    uint64_t completed = 0, failed = 0;
    // Child slots of leaves on this node (PostChannel.local); of those, the ones whose post
    // of the current round was taken, and the ones that posted again before it was whole.
    uint32_t local_mask = 0, taken = 0, ahead = 0;
  };
  // The post page of one job (abi/ce_ops.h): mapped here, its slots' CDMs, and the seq of
  // each slot taken last (the engine's own copy: the page is client-written).
  struct Page {
    int fd = -1;
    abi::ce::PostPage* p = nullptr;
    std::array<uint64_t, abi::ce::kPostSlots> owner{};
    std::array<uint32_t, abi::ce::kPostSlots> seq{};
    Page() = default;
    Page(const Page&) = delete;
    Page& operator=(const Page&) = delete;
    ~Page();
  };
  Page* page_of(const Credential& cred, bool create);
  void drop_page_if_unused(const Credential& cred);
  void post_one(CdmRegion& leaf, const abi::ce::CePost& p, bool via_page);
  // A post of a leaf of this node for channel `ce_id` was taken: the channel's local round.
  void note_local(const Credential& cred, uint32_t ce_id, uint32_t child_id, bool via_page);
  void set_local(Channel& ch, uint32_t mask);
  std::map<Credential, std::unique_ptr<Page>> pages_;
  std::map<uint64_t, std::pair<Credential, uint32_t>> page_slot_;  // attach id -> its page and slot
  struct Leaf {  // a post of one of our CDMs, waiting for its result
    uint64_t attach_id = 0;
    uint32_t target_node = 0, ce_id = 0;
    uint64_t result_addr = 0;
    uint32_t src_cq = 0, tid = 0, local_event = 0;
    uint16_t cq_mode = 0;
    uint64_t since = 0;
  };
  enum class DepKind : uint8_t { kSlot, kParent, kLeaf };
  struct Probe {
    DepKind kind;
    uint32_t ce_id = 0, slot = 0;
    uint64_t token = 0;
    uint32_t node = 0;
    uint64_t sent = 0;
  };

  static constexpr uint64_t kChannelToken = 1ull << 63;

  void contribute(const Contribution& c);        // queued; drain() runs it
  void deliver(uint32_t node, const Result& r);  // to the contributor at `node`
  void drain();
  void accept(const Contribution& c);
  void refuse(const Contribution& c, uint32_t status);
  void advance(Channel& ch);                     // completes rounds in order
  void finish(Channel& ch, const Result& r);     // the front round's result: down the tree
  void result(const Result& r);
  void leaf_result(uint64_t token, const Result& r);
  void channel_event(const Channel& ch, uint32_t status, uint64_t red_id);
  void destroy_channel(std::map<uint32_t, Channel>::iterator it, uint32_t status);
  void probe(DepKind kind, uint32_t node, uint32_t what, uint32_t ce_id, uint64_t attach, uint32_t slot,
             uint64_t token, uint32_t channel);
  void fail_dep(const Probe& p);
  void check_channel(Channel& ch);
  Round* waiting_round(Channel& ch);

  uint32_t self_;
  CeEnv env_;
  std::map<uint32_t, Channel> channels_;
  std::map<uint64_t, Leaf> leaves_;
  struct Membership {
    uint32_t node = 0, ce_id = 0, child_id = 0;
    Credential cred;
    bool operator==(const Membership& o) const {
      return node == o.node && ce_id == o.ce_id && child_id == o.child_id;
    }
  };
  static constexpr size_t kMaxMemberships = 64;  // per CDM: leaf edges of that many trees
  std::map<uint64_t, std::vector<Membership>> members_;  // by attach id
  bool slot_gone(const Channel& ch, uint32_t s) const;
  void leaf_gone(uint32_t origin, uint32_t ce_id, uint32_t child_id, const Credential& cred, uint64_t attach);
  uint64_t next_token_ = 1;
  std::map<uint64_t, Probe> probes_;
  uint64_t next_probe_ = 1;
  uint64_t now_ = 0;  // ticks
  uint32_t pending_rounds_ = 0;
  // Work for channels and posts of this node, run by drain() (never re-entered).
  bool send_contribution(uint32_t node, const Contribution& c);
  std::deque<Contribution> local_contribs_;
  std::deque<Result> local_results_;
  bool draining_ = false;
  std::optional<asio::steady_timer> timer_;
  void arm();
  struct {
    uint64_t posts = 0, contributions = 0, results = 0, errors = 0, refused = 0, probes = 0, dead = 0,
             dropped = 0, send_failures = 0, leaves_gone = 0, page_posts = 0, rings = 0, page_refused = 0;
  } ctr_;
};

}  // namespace nicemu::daemon
