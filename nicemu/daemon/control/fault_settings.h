// The node's fault configuration (fault/fault_spec.h): set at start (--fault), by SIGHUP and
// by nicemuctl fault, published in the fault page that clients read.
#pragma once
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "nicemu/daemon/stats_page.h"
#include "nicemu/fault/fault_page.h"

namespace nicemu::daemon {

class FaultSettings {
 public:
  // `path`: the fault page file (abi/fault_layout.h); empty = private memory.
  FaultSettings(const std::string& path, StatsPage& stats) : page_(path), stats_(stats) {}

  // Publishes `c` in the fault page, drawing a seed if none was given, and logs it.
  void publish(abi::fault::Config c, bool seed_given, const char* why);
  // A configuration in its text form replaces the one in force ("reload"); false
  // (configuration unchanged) with the reason if it does not parse.
  bool reload(const std::string& spec, std::string& error);
  const abi::fault::Config& config() const { return page_.config(); }
  nlohmann::json status() const;

 private:
  fault::PagePublisher page_;
  StatsPage& stats_;
};

}  // namespace nicemu::daemon
