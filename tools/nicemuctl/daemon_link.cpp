#include "daemon_link.h"

#include <fmt/core.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

#include "nicemu/abi/gni_values.h"

namespace nicemu::tools {

namespace gni = abi::gni;
using abi::ctl::Op;

std::string rc_name(int32_t rc) {
  // Indexed by gni_return_t (nicemu/abi/gni_values.h).
  static constexpr std::array<const char*, 14> kNames = {
      "GNI_RC_SUCCESS",       "GNI_RC_NOT_DONE",         "GNI_RC_INVALID_PARAM",    "GNI_RC_ERROR_RESOURCE",
      "GNI_RC_TIMEOUT",       "GNI_RC_PERMISSION_ERROR", "GNI_RC_DESCRIPTOR_ERROR", "GNI_RC_ALIGNMENT_ERROR",
      "GNI_RC_INVALID_STATE", "GNI_RC_NO_MATCH",         "GNI_RC_SIZE_ERROR",       "GNI_RC_TRANSACTION_ERROR",
      "GNI_RC_ILLEGAL_OP",    "GNI_RC_ERROR_NOMEM",
  };
  static_assert(gni::kErrorNomem == kNames.size() - 1);
  if (rc >= 0 && static_cast<size_t>(rc) < kNames.size()) return kNames[static_cast<size_t>(rc)];
  return fmt::format("GNI_RC_UNKNOWN({})", rc);
}

std::string Target::label() const {
  if (nic_addr) return fmt::format("nic {} ({})", *nic_addr, socket);
  return socket;
}

std::vector<Target> select_targets(const Selection& sel) {
  if (!sel.socket.empty()) return {Target{sel.socket, std::nullopt}};
  std::string rundir = sel.rundir.empty() ? ctl::default_rundir() : sel.rundir;
  std::vector<Target> out;
  if (!sel.nodes.empty()) {
    for (uint32_t a : sel.nodes) out.push_back(Target{ctl::socket_path(rundir, a), a});
    return out;
  }
  for (uint32_t a : ctl::list_nodes(rundir)) out.push_back(Target{ctl::socket_path(rundir, a), a});
  if (out.empty()) {
    std::error_code ec;
    bool exists = std::filesystem::is_directory(rundir, ec);
    throw CtlError(fmt::format("no nicemu daemon reachable: {} {} (use --rundir, --socket or $NICEMU_RUNDIR)",
                               exists ? "no daemon socket in run dir" : "run dir does not exist:", rundir));
  }
  return out;
}

Link::Link(Target t, std::chrono::milliseconds timeout) : t_(std::move(t)), timeout_(timeout) {
  if (!c_.connect(t_.socket)) {
    int e = errno;
    const char* hint = e == ECONNREFUSED ? " (stale socket: its daemon is gone)" : "";
    throw CtlError(fmt::format("{}: cannot connect: {}{}", t_.label(), std::strerror(e), hint));
  }
  // A stopped or wedged daemon must not hang the tool: bound every send and receive.
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(timeout.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((timeout.count() % 1000) * 1000);
  setsockopt(c_.fd(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(c_.fd(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

void Link::no_reply(const char* what) const {
  if (errno == EAGAIN || errno == EWOULDBLOCK)
    throw CtlError(fmt::format("{}: no reply to {} within {} ms", t_.label(), what, timeout_.count()));
  throw CtlError(
      fmt::format("{}: no valid reply to {} (daemon closed the connection or speaks another "
                  "protocol version)",
                  t_.label(), what));
}

nlohmann::json Link::status() {
  errno = 0;
  auto text = c_.status_json();
  if (!text) no_reply("status request");
  try {
    return nlohmann::json::parse(*text);
  } catch (const nlohmann::json::exception& e) {
    throw CtlError(fmt::format("{}: status reply is not valid JSON: {}", t_.label(), e.what()));
  }
}

abi::ctl::CredReply Link::cred(Op op, uid_t uid, uint32_t ptag, uint32_t cookie) {
  abi::ctl::Cred req{};
  req.h.op = static_cast<uint16_t>(op);
  req.uid = static_cast<uint32_t>(uid);
  req.ptag = ptag;
  req.cookie = cookie;
  abi::ctl::CredReply rep{};
  errno = 0;
  if (!c_.call(req, rep)) no_reply("credential request");
  return rep;
}

abi::ctl::FaultReply Link::fault(bool get, bool replace, const std::string& spec) {
  abi::ctl::FaultReply rep{};
  errno = 0;
  bool ok;
  if (get) {
    abi::ctl::FaultGet req{};
    req.h.op = static_cast<uint16_t>(Op::kFaultGet);
    ok = c_.call(req, rep);
  } else {
    auto req = std::make_unique<abi::ctl::FaultSet>();
    *req = abi::ctl::FaultSet{};
    req->h.op = static_cast<uint16_t>(Op::kFaultSet);
    req->replace = replace ? 1 : 0;
    if (spec.size() > sizeof req->spec) throw CtlError("fault spec longer than " + std::to_string(sizeof req->spec));
    req->spec_length = static_cast<uint32_t>(spec.size());
    std::memcpy(req->spec, spec.data(), spec.size());
    ok = c_.call(*req, rep);
  }
  if (!ok) no_reply("fault request");
  if (rep.spec_length > sizeof rep.spec || rep.error_length > sizeof rep.error) no_reply("fault request");
  return rep;
}

void Link::shutdown() {
  abi::ctl::Header req = abi::ctl::make_header<abi::ctl::Header>(Op::kShutdown, 0);
  abi::ctl::Reply rep{};
  errno = 0;
  if (!c_.call(req, rep)) no_reply("shutdown request");
  if (rep.rc != gni::kSuccess) {
    const char* hint = rep.rc == gni::kPermissionError ? " (only root or the daemon's owner may stop it)" : "";
    throw CtlError(fmt::format("{}: shutdown refused: {}{}", t_.label(), rc_name(rep.rc), hint));
  }
}

std::vector<Link> connect_all(const std::vector<Target>& targets, std::chrono::milliseconds timeout,
                              std::vector<std::string>* failures) {
  std::vector<Link> links;
  std::string last_error;
  for (const Target& t : targets) {
    try {
      links.emplace_back(t, timeout);
    } catch (const CtlError& e) {
      last_error = e.what();
      if (failures) failures->push_back(e.what());
      if (targets.size() > 1) fmt::print(stderr, "nicemuctl: warning: {}; skipped\n", e.what());
    }
  }
  if (links.empty()) {
    if (targets.size() == 1) throw CtlError("no nicemu daemon reachable: " + last_error);
    throw CtlError(fmt::format("no nicemu daemon reachable: none of the {} sockets answered", targets.size()));
  }
  return links;
}

}  // namespace nicemu::tools
