#include "fault_cmd.h"

#include <fmt/core.h>

#include <nlohmann/json.hpp>

#include "nicemu/abi/gni_values.h"
#include "nicemu/fault/fault_spec.h"

namespace nicemu::tools {

int cmd_fault(std::vector<Link>& links, FaultVerb verb, const std::vector<std::string>& words, bool as_json) {
  std::string spec;
  for (const std::string& w : words) spec += (spec.empty() ? "" : " ") + w;
  if (verb == FaultVerb::kOff) spec = "off";
  nlohmann::json out = nlohmann::json::array();
  int status = 0;
  for (Link& l : links) {
    try {
      abi::ctl::FaultReply rep = l.fault(verb == FaultVerb::kShow, verb == FaultVerb::kReset, spec);
      std::string now(rep.spec, rep.spec_length);
      if (rep.r.rc != abi::gni::kSuccess) {
        throw CtlError(fmt::format("{}: fault configuration refused: {}: {}", l.target().label(), rc_name(rep.r.rc),
                                   std::string(rep.error, rep.error_length)));
      }
      // What the configuration asks for beyond the hardware (or in vain), so nobody blames a
      // client for it; the daemon's canonical text always parses.
      std::vector<std::string> notes;
      abi::fault::Config cfg = fault::default_config();
      std::string perr;
      if (fault::parse_spec(now, cfg, perr)) notes = fault::hardware_notes(cfg);
      if (as_json) {
        nlohmann::json j{{"spec", now}, {"seed", rep.seed}, {"socket", l.target().socket}, {"notes", notes}};
        if (l.target().nic_addr) j["nic_addr"] = *l.target().nic_addr;
        out.push_back(j);
      } else {
        fmt::print("{}: {}\n", l.target().label(), now);
        for (const std::string& n : notes) fmt::print(stderr, "{}: note: {}\n", l.target().label(), n);
      }
    } catch (const CtlError& e) {
      fmt::print(stderr, "nicemuctl: {}\n", e.what());
      status = 1;
    }
  }
  if (as_json) fmt::print("{}\n", nlohmann::json{{"nodes", out}}.dump());
  return status;
}

}  // namespace nicemu::tools
