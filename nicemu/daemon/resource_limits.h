// Per-process and per-credential limits on what one client may make the daemon hold
// (issue 8): CDMs, registrations, CQs, mailboxes, datagram posts. Values come from the
// parameter table (max_*_per_process, max_*_per_credential); exhaustion is
// GNI_RC_ERROR_RESOURCE for the request, never unbounded daemon memory.
#pragma once
#include <array>
#include <cstdint>
#include <string>

#include "nicemu/common/params.h"

namespace nicemu::daemon {

enum class Resource : uint8_t { kCdms, kRegistrations, kCqs, kMailboxes, kDatagrams };
inline constexpr size_t kResourceKinds = 5;
inline constexpr std::array<const char*, kResourceKinds> kResourceNames = {"cdms", "registrations", "cqs",
                                                                            "mailboxes", "datagrams"};

struct ResourceLimits {
  std::array<uint64_t, kResourceKinds> per_process{};
  std::array<uint64_t, kResourceKinds> per_credential{};

  // The table's defaults; `get(name)` supplies configured values (the daemon's settings).
  template <typename Get>
  static ResourceLimits from(Get&& get) {
    ResourceLimits l;
    for (size_t i = 0; i < kResourceKinds; ++i) {
      l.per_process[i] = get(std::string("max_") + kResourceNames[i] + "_per_process");
      l.per_credential[i] = get(std::string("max_") + kResourceNames[i] + "_per_credential");
    }
    return l;
  }
  static ResourceLimits defaults() {
    return from([](const std::string& n) { return params::default_uint(params::param(n)); });
  }
};

}  // namespace nicemu::daemon
