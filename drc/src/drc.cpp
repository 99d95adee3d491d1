// libdrc: Cray's DRC calls as requests to this node's nicemu daemon (ctl::Drc). That daemon
// applies a change, passes it to every other daemon (this host's and the other hosts'), and
// answers once they all took it; one that refuses undoes it everywhere and the call fails
// (daemon_protocol.h, DrcState; docs/cray-pe.md, DRC).
#include "rdmacred.h"

#include <unistd.h>

#include <cstdlib>
#include <new>
#include <string>

#include "nicemu/abi/ctl_protocol.h"
#include "nicemu/abi/gni_values.h"
#include "nicemu/common/params.h"
#include "nicemu/common/wlm_job.h"
#include "nicemu/ctl/ctl_client.h"

struct drc_info {
  uint32_t magic;
  uint32_t credential;
  uint32_t ptag;
  uint32_t cookie;
};

namespace {

namespace ctl = nicemu::abi::ctl;
namespace rc = nicemu::abi::gni;
constexpr uint32_t kInfoMagic = 0x44524349;  // "DRCI"

// This node's daemon (as libugni chooses it), else the first daemon of the run directory.
std::string home_socket() {
  namespace params = nicemu::params;
  std::string rundir = nicemu::ctl::default_rundir();
  if (const char* s = std::getenv(params::param("client_socket").env.data()); s && *s) return s;
  for (const char* var : {params::param("client_node").env.data(), "PMI_GNI_LOC_ADDR"})
    if (const char* v = std::getenv(var); v && *v >= '0' && *v <= '9')
      return nicemu::ctl::socket_path(rundir, static_cast<uint32_t>(std::strtoul(v, nullptr, 10)));
  auto nodes = nicemu::ctl::list_nodes(rundir);
  return nodes.empty() ? std::string() : nicemu::ctl::socket_path(rundir, nodes.front());
}

// One request to this node's daemon; the reply's rc, or -1 if no daemon answered.
int call(ctl::Drc req, ctl::DrcReply& rep) {
  std::string socket = home_socket();
  nicemu::ctl::Connection c;
  if (socket.empty() || !c.connect(socket)) return -1;
  req.h.op = static_cast<uint16_t>(ctl::Op::kDrc);
  rep = ctl::DrcReply{};
  rep.refused_by = ctl::kDrcNoNode;  // a short reply (a malformed request) leaves it so
  if (!c.call(req, rep)) return -1;
  return rep.r.rc;
}

int to_drc(int r) {
  switch (r) {
    case rc::kSuccess: return DRC_SUCCESS;
    case -1: return -DRC_ECONNREFUSED;
    case rc::kInvalidParam: return -DRC_EINVAL;
    case rc::kPermissionError: return -DRC_EPERM;
    case rc::kNoMatch: return -DRC_CRED_NOT_FOUND;
    case rc::kInvalidState: return -DRC_ALREADY_GRANTED;
    case rc::kErrorResource: return -DRC_ENOSPC;
    default: return -DRC_CRED_EXTERNAL_FAILURE;
  }
}

// A change: this node's daemon's answer. A refusal by another daemon (the change undone
// everywhere) is DRC_CRED_EXTERNAL_FAILURE: the nodes disagree about that credential.
int change(const ctl::Drc& req) {
  ctl::DrcReply rep;
  int r = call(req, rep);
  if (r != rc::kSuccess && r != -1 && rep.refused_by != ctl::kDrcNoNode) return -DRC_CRED_EXTERNAL_FAILURE;
  return to_drc(r);
}

bool grant_kind(int flags, uint32_t& kind) {
  switch (flags) {
    case DRC_FLAGS_TARGET_UID: kind = static_cast<uint32_t>(ctl::DrcGrant::kUid); return true;
    case DRC_FLAGS_TARGET_GID: kind = static_cast<uint32_t>(ctl::DrcGrant::kGid); return true;
    case DRC_FLAGS_TARGET_WLM: kind = static_cast<uint32_t>(ctl::DrcGrant::kWlm); return true;
    default: return false;
  }
}

int grant_or_revoke(ctl::DrcAction action, uint32_t credential, uint32_t value, int flags) {
  ctl::Drc req{};
  if (credential == 0 || !grant_kind(flags, req.kind)) return -DRC_EINVAL;
  req.action = static_cast<uint32_t>(action);
  req.id = credential;
  req.value = value;
  return change(req);
}

}  // namespace

extern "C" {

int drc_acquire(uint32_t* credential, int flags) {
  if (!credential || (flags & ~DRC_FLAGS_FLEX_CREDENTIAL) != 0) return -DRC_EINVAL;
  ctl::Drc req{};
  req.action = static_cast<uint32_t>(ctl::DrcAction::kAcquire);
  req.flags = (flags & DRC_FLAGS_FLEX_CREDENTIAL) ? ctl::kDrcFlex : 0;
  ctl::DrcReply rep;
  int r = call(req, rep);
  // Another daemon refusing (its own credential has those values) undid it everywhere.
  if (r != rc::kSuccess) return r == rc::kErrorResource || r == -1 ? to_drc(r) : -DRC_CRED_CREATE_FAILURE;
  *credential = rep.id;
  return DRC_SUCCESS;
}

int drc_grant(uint32_t credential, uint32_t value, int flags) {
  return grant_or_revoke(ctl::DrcAction::kGrant, credential, value, flags);
}

int drc_revoke(uint32_t credential, uint32_t value, int flags) {
  return grant_or_revoke(ctl::DrcAction::kRevoke, credential, value, flags);
}

int drc_access(uint32_t credential, int flags, drc_info_handle_t* info) {
  if (credential == 0 || flags != 0 || !info) return -DRC_EINVAL;
  ctl::Drc req{};
  req.action = static_cast<uint32_t>(ctl::DrcAction::kAccess);
  req.id = credential;
  ctl::DrcReply rep;
  int r = call(req, rep);
  if (r != rc::kSuccess) return to_drc(r);
  auto* h = new (std::nothrow) drc_info{kInfoMagic, credential, rep.ptag, rep.cookie};
  if (!h) return -DRC_ENOSPC;
  *info = h;
  return DRC_SUCCESS;
}

uint32_t drc_get_first_cookie(drc_info_handle_t info) {
  return info && info->magic == kInfoMagic ? info->cookie : 0;
}

// A nicemu credential has one cookie; Cray's second cookie (a second protection domain)
// has no counterpart, so 0, which GNI_GetPtag finds nothing for.
uint32_t drc_get_second_cookie(drc_info_handle_t info) {
  (void)info;
  return 0;
}

int drc_release_local(drc_info_handle_t* info) {
  if (!info || !*info || (*info)->magic != kInfoMagic) return -DRC_EINVAL;
  (*info)->magic = 0;
  delete *info;
  *info = nullptr;
  return DRC_SUCCESS;
}

int drc_release(uint32_t credential, int flags) {
  if (credential == 0 || flags != 0) return -DRC_EINVAL;
  ctl::Drc req{};
  req.action = static_cast<uint32_t>(ctl::DrcAction::kRelease);
  req.id = credential;
  return change(req);
}

uint32_t drc_get_wlm_id(void) {
  auto job = nicemu::wlm::job_of(getpid());
  return job ? job->id : 0;
}

const char* drc_strerror(int errnum) {
  switch (errnum < 0 ? -errnum : errnum) {
    case DRC_SUCCESS: return "DRC_SUCCESS: success";
    case DRC_EINVAL: return "DRC_EINVAL: invalid argument";
    case DRC_EPERM: return "DRC_EPERM: permission denied (not the owner, or not granted)";
    case DRC_ENOSPC: return "DRC_ENOSPC: no credential left";
    case DRC_ECONNREFUSED: return "DRC_ECONNREFUSED: no nicemu daemon answered";
    case DRC_ALREADY_GRANTED: return "DRC_ALREADY_GRANTED: already granted";
    case DRC_CRED_NOT_FOUND: return "DRC_CRED_NOT_FOUND: no such credential";
    case DRC_CRED_CREATE_FAILURE: return "DRC_CRED_CREATE_FAILURE: a daemon refused the credential (undone on all)";
    case DRC_CRED_EXTERNAL_FAILURE: return "DRC_CRED_EXTERNAL_FAILURE: another node's daemon refused the change (undone on all)";
    case DRC_BAD_TOKEN: return "DRC_BAD_TOKEN: bad token";
    default: return "unknown DRC error";
  }
}

}  // extern "C"
