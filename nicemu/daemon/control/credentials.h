// Who may use the NIC: the node's job credentials and DRC credentials (credential_table.h),
// the rules that issue, grant, revoke and check them, the file that keeps them across a
// restart, and the DRC changes exchanged with the other hosts' daemons (ctl::DrcSync).
#pragma once
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "nicemu/abi/ctl_protocol.h"
#include "nicemu/daemon/control/node_counters.h"
#include "nicemu/daemon/credential_table.h"
#include "nicemu/daemon/fabric_port.h"

namespace nicemu::daemon {

struct Peer;

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
  int drc(Peer& peer, const abi::ctl::Drc& req, abi::ctl::DrcReply& r);
  // A DRC change this node accepted from a client of this host, to every node of the other
  // hosts (ctl::DrcSync).
  void send_drc_sync(const Peer& peer, const abi::ctl::Drc& req, const abi::ctl::DrcReply& r);
  // One of those from another host, applied here (routed by the port).
  const char* receive(uint32_t from, const abi::ctl::Header&, const uint8_t* msg, size_t len) override;

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
  // Whether one of DRC credential `d`'s grants admits `peer` (uid, gid, or its job).
  bool drc_admits(const Peer& peer, const DrcCredential& d) const;

  uint32_t nic_addr_;
  std::string cred_path_;
  Counters& ctr_;
  FabricPort& port_;
  CredentialMap credentials_;
  DrcMap drc_;
  std::string saved_;  // the text in cred_path_ ("" = no file)
};

}  // namespace nicemu::daemon
