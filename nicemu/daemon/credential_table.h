// The node's credentials — job credentials with their owners, DRC credentials with their
// grants — and the file that keeps them across a restart of the daemon.
//
// Credentials outlive the daemon's process: a running job's ranks that attach after their
// host's daemon restarted must still be admitted, and launchers (the SPANK plugin,
// nicemu-run) grant once per job. So the daemon writes the table to a file in its run
// directory (RUNDIR/nic-ADDR.cred, mode 0600, a temporary file renamed over it) after every
// change and reads it back at start. The file exists only while the table is not empty.
// What the processes hold (attached CDMs, registrations, mailboxes, datagram posts, MSGQ
// segments) dies with their connections and is not kept.
//
// The file is JSON: {"format": "nicemu credentials", "version": 2, "nic_addr": N,
// "credentials": [{"ptag", "cookie", "uid", "gid", "has_gid", "drc_id"}...],
// "drc": [{"id", "ptag", "cookie", "flex", "rev", "grants": [[kind, value]...]}...],
// "drc_released": [[id, rev]...]}. A version 1 file (no revisions, no released list) is
// read as revision 1 of each credential.
// A file that is not a regular file owned by the daemon's user with no group or other
// permissions, that does not parse, has another format, version or NIC address, or whose
// entries are out of range or inconsistent is reported and ignored as a whole: the daemon
// then starts with no credentials, and its next change replaces the file.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "nicemu/daemon/cdm/cdm_region.h"

namespace nicemu::daemon {

// Who may use a job credential: one uid, and optionally the processes of one group.
struct CredOwner {
  uid_t uid = 0;
  gid_t gid = 0;
  bool has_gid = false;
  uint32_t drc_id = 0;  // a DRC credential (drc_): its grants admit others too
};

// A Cray DRC credential (libdrc): the job credential it names, and whom its owner granted it.
// Its owner is the uid of that credential's CredOwner, whose drc_id names it back: the two
// come and go together (acquire, release, and a revoke of the job credential).
struct DrcCredential {
  Credential cred;
  bool flex = false;
  std::vector<std::pair<uint32_t, uint32_t>> grants;  // (abi::ctl::DrcGrant, uid/gid/job id)
  uint64_t rev = 1;  // revision across the daemons (daemon_protocol.h, DrcState): 1 = acquired
};
// "uid", "gid" or "job": a grant's kind in logs and the status document.
inline const char* drc_grant_name(uint32_t kind) {
  static constexpr const char* kNames[] = {"?", "uid", "gid", "job"};
  return kNames[kind < 4 ? kind : 0];
}

using CredentialMap = std::map<Credential, CredOwner>;
using DrcMap = std::map<uint32_t, DrcCredential>;  // DRC id -> credential and grants
// Released DRC credentials: id -> the revision of the release, so a daemon that was away
// learns of it from any other (the oldest are forgotten past kDrcReleasedKept).
using DrcReleased = std::map<uint32_t, uint64_t>;
inline constexpr size_t kDrcReleasedKept = 4096;

namespace credential_file {

inline constexpr int kVersion = 2;
// Larger files are refused unread (a table of a few thousand credentials is well below).
inline constexpr size_t kMaxBytes = 16u << 20;

// The file's text for this table.
std::string encode(uint32_t nic_addr, const CredentialMap& creds, const DrcMap& drc, const DrcReleased& released);
// Parses `text` into `creds`, `drc` and `released` (all left empty on failure); "" on
// success, else what is wrong.
std::string decode(const std::string& text, uint32_t nic_addr, CredentialMap& creds, DrcMap& drc,
                   DrcReleased& released);

enum class ReadResult { kOk, kAbsent, kRejected };
// Reads `path` into `text` after checking what it is (see above); `why` on kRejected.
ReadResult read(const std::string& path, std::string& text, std::string& why);
// Replaces `path` by `text` atomically (PATH.tmp written with mode 0600, then renamed);
// false with `why` on failure, `path` then unchanged.
bool write(const std::string& path, const std::string& text, std::string& why);

}  // namespace credential_file
}  // namespace nicemu::daemon
