// nicemuctl's side of the control protocol: which daemons a command addresses (the run
// dir, one socket, or NIC addresses) and one short-lived, time-limited connection to each.
// Every failure is a CtlError whose text names the daemon and the reply code.
#pragma once
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "nicemu/abi/ctl_protocol.h"
#include "nicemu/ctl/ctl_client.h"

namespace nicemu::tools {

struct CtlError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// gni_return_t value as its GNI_RC_* name ("GNI_RC_UNKNOWN(42)" for others).
std::string rc_name(int32_t rc);

// One daemon's control socket; the NIC address is known when it came from the run dir or
// --node, not for a bare --socket.
struct Target {
  std::string socket;
  std::optional<uint32_t> nic_addr;
  std::string label() const;  // "nic 10 (/run/dir/nic-10.sock)"
};

struct Selection {
  std::string rundir;           // empty: ctl::default_rundir()
  std::string socket;           // one daemon by socket path
  std::vector<uint32_t> nodes;  // daemons by NIC address in the run dir
};

// The daemons a command addresses: --socket, else --node(s), else every socket in the run
// dir. Throws CtlError if the run dir holds no daemon socket.
std::vector<Target> select_targets(const Selection& sel);

class Link {
 public:
  // Connects; throws CtlError naming the socket and errno if nothing answers there.
  Link(Target t, std::chrono::milliseconds timeout);

  const Target& target() const { return t_; }

  nlohmann::json status();
  // A credential request (kCredIssue/kCredGrant/kCredRevoke); the reply's rc is left to
  // the caller, a missing or malformed reply throws.
  abi::ctl::CredReply cred(abi::ctl::Op op, uid_t uid, uint32_t ptag, uint32_t cookie);
  // A fault-injection request (kFaultSet with `spec`, or kFaultGet when `get`); the reply's
  // rc is left to the caller, a missing or malformed reply throws.
  abi::ctl::FaultReply fault(bool get, bool replace, const std::string& spec);
  // Asks the daemon to exit; throws if it refuses.
  void shutdown();

 private:
  [[noreturn]] void no_reply(const char* what) const;

  Target t_;
  ctl::Connection c_;
  std::chrono::milliseconds timeout_;
};

// Connects to every target. Unreachable ones are reported on stderr (and appended to
// `failures` if given) and skipped; throws CtlError if none answers.
std::vector<Link> connect_all(const std::vector<Target>& targets, std::chrono::milliseconds timeout,
                              std::vector<std::string>* failures = nullptr);

}  // namespace nicemu::tools
