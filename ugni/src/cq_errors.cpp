// GNI_CqErrorStr and GNI_CqErrorRecoverable (fact sheet §11.2, §18.1): decode the status
// field of a CQ entry (nicemu/abi/cq_entry.h `Status`) for logs and for the client's
// retry-or-abort decision.
#include "gni_pub.h"

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iterator>

#include "nicemu/abi/cq_entry.h"

namespace cqe = nicemu::abi::cqe;

namespace {

struct StatusText {
  const char* name;
  const char* what;
};

// Indexed by cqe::Status.
constexpr StatusText kStatusText[] = {
    {"OK", "no error"},  // printed by its own branch
    {"PROTECTION_ERROR", "remote memory handle invalid, of another domain or deregistered"},
    {"BOUNDS_ERROR", "access outside the registered range"},
    {"READ_ONLY_ERROR", "write into a read-only registration"},
    {"PEER_GONE", "target process died or detached"},
    {"NIC_DOWN", "the emulated NIC (nicemu daemon) shut down"},
    {"NO_PEER", "no such NIC address or instance in this domain"},
    {"MEMORY_ACCESS_ERROR", "target pages are no longer mapped"},
    {"TRANSIENT_ERROR", "transient network error after retries"},
    {"LOCAL_PROTECTION_ERROR", "local memory handle invalid"},
    {"INJECTED_ERROR", "injected transient error"},
};
static_assert(std::size(kStatusText) == cqe::kErrStatusLast);

}  // namespace

extern "C" {

gni_return_t GNI_CqErrorStr(gni_cq_entry_t entry, void* buffer, uint32_t len) {
  if (buffer == nullptr) return GNI_RC_INVALID_PARAM;

  const uint64_t status = cqe::status_of(entry);
  char text[160];
  if (status == cqe::kOk) {
    std::snprintf(text, sizeof text, "OK: no error (status 0)");
  } else if (status < std::size(kStatusText)) {
    std::snprintf(text, sizeof text, "%s: %s (status %u, %s)", kStatusText[status].name,
                  kStatusText[status].what, static_cast<unsigned>(status),
                  cqe::status_recoverable(status) ? "recoverable" : "not recoverable");
  } else {
    std::snprintf(text, sizeof text, "UNKNOWN_ERROR: unknown status %u (not recoverable)",
                  static_cast<unsigned>(status));
  }

  // A short buffer still gets a truncated, terminated string for clients that log it
  // without checking the return code.
  const std::size_t need = std::strlen(text) + 1;
  if (len < need) {
    if (len > 0) {
      std::memcpy(buffer, text, len - 1);
      static_cast<char*>(buffer)[len - 1] = '\0';
    }
    return GNI_RC_SIZE_ERROR;
  }
  std::memcpy(buffer, text, need);
  return GNI_RC_SUCCESS;
}

gni_return_t GNI_CqErrorRecoverable(gni_cq_entry_t entry, uint32_t* recoverable) {
  if (recoverable == nullptr) return GNI_RC_INVALID_PARAM;
  const uint64_t status = cqe::status_of(entry);
  if (status == cqe::kOk) return GNI_RC_INVALID_STATE;  // nothing to recover from
  *recoverable = cqe::status_recoverable(status) ? 1 : 0;
  return GNI_RC_SUCCESS;
}

}  // extern "C"
