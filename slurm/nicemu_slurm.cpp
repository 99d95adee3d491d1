// The C interface of nicemu_slurm.h over the control client. No exception leaves it: the
// plugin runs inside slurmstepd and slurmd, which are C.
#include "nicemu_slurm.h"

#include <sodium.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "nicemu/abi/ctl_protocol.h"
#include "nicemu/abi/gni_values.h"
#include "nicemu/ctl/ctl_client.h"
#include "nicemu/fabric/packet_codec.h"

namespace {

namespace ctl = nicemu::abi::ctl;

int fail(char* err, size_t errlen, const std::string& msg) {
  if (err && errlen) std::snprintf(err, errlen, "%s", msg.c_str());
  return -1;
}

std::string rundir_or_default(const char* rundir) {
  return rundir && *rundir ? std::string(rundir) : nicemu::ctl::default_rundir();
}

// One credential request to the daemon at `path`; false with `why` when it does not answer.
bool cred_call(const std::string& path, ctl::Op op, uint32_t uid, const nicemu_job_cred& c, int timeout_ms,
               ctl::CredReply& rep, std::string& why) {
  nicemu::ctl::Connection conn;
  if (!conn.connect(path)) {
    int e = errno;
    why = path + ": " + std::strerror(e) + (e == ECONNREFUSED ? " (stale socket: the daemon is not running)" : "");
    return false;
  }
  // A wedged daemon must not hang the step's launch.
  timeval tv{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
  setsockopt(conn.fd(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(conn.fd(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  ctl::Cred req{};
  req.h.op = static_cast<uint16_t>(op);
  req.uid = uid;
  req.ptag = c.ptag;
  req.cookie = c.cookie;
  rep = ctl::CredReply{};
  errno = 0;
  if (!conn.call(req, rep)) {
    why = path + (errno == EAGAIN || errno == EWOULDBLOCK ? ": no reply within " + std::to_string(timeout_ms) + " ms"
                                                          : ": no valid reply (another protocol version?)");
    return false;
  }
  return true;
}

}  // namespace

extern "C" int nicemu_slurm_derive(const char* key_path, uint32_t job_id, nicemu_job_cred* out, char* err,
                                   size_t errlen) {
  try {
    if (sodium_init() < 0) return fail(err, errlen, "libsodium failed to initialise");
    uint8_t key[nicemu::abi::wire::kKeyBytes];
    nicemu::fabric::load_key(key_path, key);
    static_assert(sizeof key >= crypto_generichash_KEYBYTES_MIN && sizeof key <= crypto_generichash_KEYBYTES_MAX);
    // Domain-separated from any other use of the same key file.
    std::string msg = "nicemu slurm job credential " + std::to_string(job_id);
    uint8_t h[16];
    crypto_generichash(h, sizeof h, reinterpret_cast<const uint8_t*>(msg.data()), msg.size(), key, sizeof key);
    sodium_memzero(key, sizeof key);
    uint64_t a, b;
    std::memcpy(&a, h, 8);
    std::memcpy(&b, h + 8, 8);
    out->ptag = 3 + static_cast<uint32_t>(a % 251);
    out->cookie = ((128 + static_cast<uint32_t>(b % (65407 - 128))) << 16) | static_cast<uint32_t>((b >> 32) & 0xFFFF);
    return 0;
  } catch (const std::exception& e) {
    return fail(err, errlen, e.what());
  }
}

extern "C" int nicemu_slurm_issue(const char* rundir, uint32_t uid, const nicemu_job_cred* cred, int timeout_ms,
                                  uint32_t* nic_addr, char* err, size_t errlen) {
  try {
    std::string dir = rundir_or_default(rundir);
    auto nodes = nicemu::ctl::list_nodes(dir);
    if (nodes.empty()) return fail(err, errlen, "no nicemu daemon on this node (no daemon socket in " + dir + ")");
    // All or nothing: a daemon that refuses or does not answer makes the grants this call
    // made on the others undone (those it found there already, an earlier step's, stay).
    std::vector<uint32_t> created;
    auto undo = [&](const std::string& msg) {
      std::string left;
      for (uint32_t m : created) {
        ctl::CredReply rev;
        std::string why;
        if (!cred_call(nicemu::ctl::socket_path(dir, m), ctl::Op::kCredRevoke, 0, *cred, timeout_ms, rev, why) ||
            (rev.r.rc != 0 && rev.r.rc != nicemu::abi::gni::kNoMatch))
          left += (left.empty() ? "" : ", ") + std::to_string(m) + (why.empty() ? "" : " (" + why + ")");
      }
      return fail(err, errlen,
                  msg + (created.empty() ? std::string()
                         : left.empty()  ? "; undone on the " + std::to_string(created.size()) + " daemon(s) that took it"
                                         : "; could not be undone on NIC " + left));
    };
    for (uint32_t n : nodes) {
      ctl::CredReply rep;
      std::string why;
      // A grant with explicit values creates the credential or confirms it for the same
      // uid (the job's later steps); an issue would look for a free one instead.
      if (!cred_call(nicemu::ctl::socket_path(dir, n), ctl::Op::kCredGrant, uid, *cred, timeout_ms, rep, why))
        return undo("the nicemu daemon of NIC " + std::to_string(n) + " is not running: " + why);
      if (rep.r.rc != 0)
        return undo("the nicemu daemon of NIC " + std::to_string(n) + " refused the job credential (ptag " +
                    std::to_string(cred->ptag) + ", gni rc " + std::to_string(rep.r.rc) +
                    (rep.r.rc == nicemu::abi::gni::kPermissionError ? ": another user's job holds it" : "") + ")");
      if (rep.created) created.push_back(n);
    }
    *nic_addr = nodes.front();
    return 0;
  } catch (const std::exception& e) {
    return fail(err, errlen, e.what());
  }
}

extern "C" int nicemu_slurm_revoke(const char* rundir, const nicemu_job_cred* cred, int timeout_ms, int* revoked,
                                   char* err, size_t errlen) {
  try {
    std::string dir = rundir_or_default(rundir);
    *revoked = 0;
    std::string failures;
    for (uint32_t n : nicemu::ctl::list_nodes(dir)) {
      ctl::CredReply rep;
      std::string why;
      // uid 0: the plugin revokes as root, whoever holds the credential.
      if (!cred_call(nicemu::ctl::socket_path(dir, n), ctl::Op::kCredRevoke, 0, *cred, timeout_ms, rep, why)) {
        failures += (failures.empty() ? "" : "; ") + why;
        continue;
      }
      if (rep.r.rc == 0) ++*revoked;
    }
    if (!failures.empty()) return fail(err, errlen, failures);
    return 0;
  } catch (const std::exception& e) {
    return fail(err, errlen, e.what());
  }
}
