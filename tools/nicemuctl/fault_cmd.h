// nicemuctl fault: show, change (merge), replace or switch off the fault-injection
// configuration of the selected daemons (nicemu/fault/fault_spec.h for the syntax).
#pragma once
#include <string>
#include <vector>

#include "daemon_link.h"

namespace nicemu::tools {

enum class FaultVerb { kShow, kSet, kReset, kOff };

// Prints one line per daemon ("nic N: <spec>") or a JSON document; 0, or 1 if a daemon
// refused (the reason is printed).
int cmd_fault(std::vector<Link>& links, FaultVerb verb, const std::vector<std::string>& words, bool json);

}  // namespace nicemu::tools
