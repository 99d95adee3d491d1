// Who may use the NIC: the node's job credentials and DRC credentials (credential_table.h),
// the rules that issue, grant, revoke and check them, the file that keeps them across a
// restart, and the DRC table kept the same on every daemon (daemon_protocol.h, DrcState):
// changes acknowledged by every daemon or undone, tables asked for at start.
#pragma once
#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>

#include <nlohmann/json_fwd.hpp>

#include "nicemu/abi/ctl_protocol.h"
#include "nicemu/abi/daemon_protocol.h"
#include "nicemu/daemon/control/node_counters.h"
#include "nicemu/daemon/control/request.h"
#include "nicemu/daemon/credential_table.h"
#include "nicemu/daemon/fabric_port.h"

namespace nicemu::daemon {

class Credentials : public FabricService {
 public:
  // `cred_path`: the table's file ("" = memory only); `port`: where DRC changes go to and
  // come from (used after construction only).
  Credentials(uint32_t nic_addr, std::string cred_path, Counters& ctr, FabricPort& port)
      : nic_addr_(nic_addr), cred_path_(std::move(cred_path)), ctr_(ctr), port_(port) {}

  bool may_use(const Peer& peer, const Credential& c) const;
  // Counts and logs (rate-limited per connection) a request refused because the caller
  // may not use credential `c`; returns GNI_RC_PERMISSION_ERROR.
  int refuse(Peer& peer, const char* what, const Credential& c);
  bool known(const Credential& c) const { return credentials_.contains(c); }
  // --allow-any-credential: `c`, unknown so far, becomes uid `uid`'s (and is saved).
  void admit(const Credential& c, uid_t uid);
  // Issue, grant or revoke a job credential (ctl::Cred, op in `h`); libdrc's requests.
  int cred(Peer& peer, const abi::ctl::Header& h, const abi::ctl::Cred& req, abi::ctl::CredReply& r);
  // A libdrc request (ctl::Drc; `h` its header). Access and look-up are answered in
  // `reply` at once; a change is applied here, passed to every other daemon and answered
  // when they have all accepted it (or cannot be reached), through `reply` if that is at
  // once, else through the peer's reply_later. Changes run one at a time, in arrival order.
  void drc_request(Peer& peer, const abi::ctl::Header& h, const abi::ctl::Drc& req, std::vector<char>& reply);
  // The DRC messages of other daemons (DrcState, DrcAck, DrcTableAsk, DrcTableEnd): from the
  // port (other hosts) or from control::drc_peer (this host's daemons, by their sockets).
  const char* receive(uint32_t from, const abi::ctl::Header&, const uint8_t* msg, size_t len) override;
  void peer_lost(uint32_t node) override;
  // A daemon whose channel was lost gets this one's table once the channel is up again.
  void progress() override;

  // At start, before the control socket is served: asks every other daemon for its DRC table
  // and merges the answers. Until converged(), the node holds attaches and credential
  // requests (Node::must_wait); `when_converged` callbacks run once it is.
  void converge(asio::io_context& io);
  bool converged() const { return converged_; }
  void when_converged(std::function<void()> f);

  // The table from the file, at start.
  void load();
  // Writes the table to the file if it changed since the last write (removes the file when
  // the table is empty). A failure is logged; the table in memory stands.
  void save();

  // The cookie of `c` as the status document shows it to `viewer` (null: not its business).
  nlohmann::json shown_cookie(const Peer* viewer, const Credential& c) const;
  // The credentials for the status document.
  nlohmann::json status(const Peer* viewer) const;

 private:
  // One DRC credential as every daemon holds it: its state at revision `rev`.
  struct DrcSnap {
    uint32_t id = 0;
    uint64_t rev = 0;  // 0: never heard of
    bool live = false;
    Credential cred{};
    uid_t uid = 0;
    bool flex = false;
    std::vector<std::pair<uint32_t, uint32_t>> grants;
  };
  // A client's change waiting for its turn, or in progress.
  struct Pending {
    Peer peer;
    abi::ctl::Header h;
    abi::ctl::Drc req;
    std::vector<char>* inline_reply;  // the request's own reply buffer while it is handled, else null
  };
  struct Txn {
    Pending p;
    uint64_t id = 0;
    DrcSnap before, after;
    abi::ctl::DrcReply rep{};
    std::set<uint32_t> waiting;  // daemons whose DrcAck has not come
    uint32_t refused_by = abi::ctl::kDrcNoNode;
    int refused_rc = 0;
  };

  // The change a client asked for on the table here (rules, owner checks); `r` filled.
  int drc(Peer& peer, const abi::ctl::Drc& req, abi::ctl::DrcReply& r);
  // Whether one of DRC credential `d`'s grants admits `peer` (uid, gid, or its job).
  bool drc_admits(const Peer& peer, const DrcCredential& d) const;
  DrcSnap snap(uint32_t id) const;
  // Takes `s` if it is newer than what is held; GNI_RC_PERMISSION_ERROR if its ptag and
  // cookie are another credential's here (nothing changed), else kSuccess.
  int take(const DrcSnap& s);
  // Every other daemon: this host's (by socket) and the other hosts' (fabric).
  std::vector<uint32_t> peers();
  bool send_state(uint32_t node, const DrcSnap& s, uint64_t txn);
  void start_next();
  void ack(uint32_t from, uint64_t txn, int rc);
  void finish();
  void arm_timer(std::chrono::milliseconds after, std::function<void()> f);
  void answer_table(uint32_t node);
  void converge_done(const char* how);

  uint32_t nic_addr_;
  std::string cred_path_;
  Counters& ctr_;
  FabricPort& port_;
  CredentialMap credentials_;
  DrcMap drc_;
  DrcReleased released_;
  std::string saved_;  // the text in cred_path_ ("" = no file)
  std::deque<Pending> queue_;
  std::optional<Txn> txn_;
  uint64_t next_txn_ = 1;
  std::unique_ptr<asio::steady_timer> timer_;
  bool converged_ = true;  // false from converge() until an answer (or the wait) ends it
  std::set<uint32_t> asked_;  // daemons asked for their table that have not answered
  std::set<uint32_t> resync_;  // other hosts' daemons whose channel was lost (progress)
  std::vector<std::function<void()>> on_converged_;
};

}  // namespace nicemu::daemon
