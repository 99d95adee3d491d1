// The fault configuration (nicemuctl fault, --fault, SIGHUP): parsed, checked and published
// in the fault page (fault/fault_spec.h).
#include "nicemu/daemon/control/fault_settings.h"

#include <unistd.h>

#include <algorithm>

#include <sodium.h>
#include <spdlog/spdlog.h>

#include <nlohmann/json.hpp>

#include "nicemu/daemon/control/handlers.h"
#include "nicemu/fault/fault_spec.h"

namespace nicemu::daemon {

using namespace nicemu::abi;

void FaultSettings::publish(abi::fault::Config c, bool seed_given, const char* why) {
  // Every run has a seed in the log, so a failing run can be replayed with seed=N.
  if (!seed_given && c.seed == 0) c.seed = (uint64_t{randombytes_random()} << 32) | randombytes_random();
  page_.publish(c);
  stats_.node(abi::counters::node::fault_config_changes).add(1);
  if (c.enabled || std::string_view(why) != "start")
    spdlog::info("fault injection ({}): {}", why, nicemu::fault::to_spec(c));
}

bool FaultSettings::reload(const std::string& spec, std::string& error) {
  abi::fault::Config c = nicemu::fault::default_config();
  bool seed_given = false;
  if (!nicemu::fault::parse_spec(spec, c, error, &seed_given)) return false;
  publish(c, seed_given, "reload");
  return true;
}

nlohmann::json FaultSettings::status() const {
  return {{"enabled", config().enabled != 0},
          {"seed", config().seed},
          {"spec", nicemu::fault::to_spec(config())},
          {"page", page_.path()}};
}

void control::fault(Request& q, FaultSettings& settings, Counters& ctr) {
  auto answer = [&](int rc, const std::string& error) {
    auto& r = init_reply<ctl::FaultReply>(q.reply, q.h);
    r.r.rc = rc;
    const abi::fault::Config& now = settings.config();
    r.seed = now.seed;
    std::string text = nicemu::fault::to_spec(now);
    r.spec_length = static_cast<uint32_t>(std::min<size_t>(text.size(), sizeof r.spec));
    std::memcpy(r.spec, text.data(), r.spec_length);
    r.error_length = static_cast<uint32_t>(std::min<size_t>(error.size(), sizeof r.error));
    std::memcpy(r.error, error.data(), r.error_length);
  };
  if (static_cast<Op>(q.h.op) == Op::kFaultGet) {
    ctl::FaultGet req;
    if (!parse(q, req)) return ++ctr.malformed_messages, answer(rc::kInvalidParam, "malformed request");
    return answer(rc::kSuccess, "");
  }
  ctl::FaultSet req;
  if (!parse(q, req) || req.spec_length > sizeof req.spec || req.replace > 1) {
    ++ctr.malformed_messages;
    return answer(rc::kInvalidParam, "malformed request");
  }
  // Faults disturb every client of the node: only its owner (or root) may change them.
  if (q.peer.uid != 0 && q.peer.uid != getuid()) return answer(rc::kPermissionError, "not the daemon's user");
  abi::fault::Config c = req.replace ? nicemu::fault::default_config() : settings.config();
  std::string err;
  bool seed_given = false;
  if (!nicemu::fault::parse_spec(std::string_view(req.spec, req.spec_length), c, err, &seed_given))
    return answer(rc::kInvalidParam, err);
  if (!seed_given && req.replace) c.seed = 0;  // a fresh configuration gets a fresh seed
  settings.publish(c, seed_given, "nicemuctl");
  answer(rc::kSuccess, "");
}

}  // namespace nicemu::daemon
