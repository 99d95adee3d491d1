// Completion-queue entry encoding shared by libugni (the exported gni_cq_get_* accessors),
// the NIC engines that produce entries and the daemon. A project decision (the fact sheet's
// suggested layout); gni_pub.h's macros call the exported accessors, so only this file and
// ugni/src/cq_entry.cpp need to agree.
#pragma once
#include <cstdint>

namespace nicemu::abi::cqe {

inline constexpr unsigned kOverrunShift = 63;
inline constexpr unsigned kStatusShift = 59;   // bits 62..59
inline constexpr uint64_t kStatusMask = 0xF;
inline constexpr unsigned kSourceShift = 56;   // bits 58..56, non-zero in every valid entry
inline constexpr uint64_t kSourceMask = 0x7;
inline constexpr unsigned kTypeShift = 54;     // bits 55..54
inline constexpr uint64_t kTypeMask = 0x3;
inline constexpr unsigned kInfoShift = 48;     // bits 53..48
inline constexpr uint64_t kInfoMask = 0x3F;
inline constexpr unsigned kTidShift = 32;      // bits 47..32
inline constexpr uint64_t kTidMask = 0xFFFF;
inline constexpr uint64_t kIdMask = 0xFFFFFFFFull;
inline constexpr uint64_t kDataMask = 0xFFFFFFFFFFFFull;  // bits 47..0

// Event types (values of GNI_CQ_EVENT_TYPE_*).
inline constexpr uint64_t kTypePost = 0;
inline constexpr uint64_t kTypeSmsg = 1;
inline constexpr uint64_t kTypeDmapp = 2;
inline constexpr uint64_t kTypeMsgq = 3;

// Gemini-style source codes.
enum Source : uint64_t {
  kSrcLocalRequest = 1,   // local completion of an FMA request
  kSrcLocalDma = 2,
  kSrcLocalResponse = 3,  // global completion (response received)
  kSrcBte = 4,
  kSrcRemoteRequest = 5,  // remote event of a PUT / CQ write / SMSG
  kSrcRemoteDma = 6,
  kSrcRemoteResponse = 7,
};

// Info bits: which kind of local completion an entry reports (used for DUAL_EVENTS).
inline constexpr uint64_t kInfoLocal = 0x1;
inline constexpr uint64_t kInfoGlobal = 0x2;
// A collective-engine channel event (GNI_CeConfigure's CQ): id is the channel, tid the low
// 16 bits of the reduction id (gni_cq_get_ce_id / gni_cq_get_reductn_id).
inline constexpr uint64_t kInfoCe = 0x4;

// Error status codes (bits 62..59). Decoded by GNI_CqErrorStr / GNI_CqErrorRecoverable.
enum Status : uint64_t {
  kOk = 0,
  kErrProtection = 1,      // memory handle invalid, wrong domain or deregistered
  kErrBounds = 2,          // access outside the registered range
  kErrReadOnly = 3,        // write into a read-only registration
  kErrPeerGone = 4,        // target process died or detached
  kErrNicDown = 5,         // the daemon (NIC) shut down
  kErrNoPeer = 6,          // no such NIC address / instance in this domain
  kErrMemAccess = 7,       // target pages not mapped any more
  kErrTransient = 8,       // transient network error after retries (recoverable)
  kErrLocalProtection = 9, // local memory handle invalid
  kErrInjected = 10,       // injected transient error (recoverable)
  kErrStatusLast = 11,
};

constexpr bool status_recoverable(uint64_t s) { return s == kErrTransient || s == kErrInjected; }

constexpr uint64_t make(uint64_t source, uint64_t type, uint64_t status, uint64_t info,
                        uint64_t tid, uint64_t id) {
  return ((status & kStatusMask) << kStatusShift) | ((source & kSourceMask) << kSourceShift) |
         ((type & kTypeMask) << kTypeShift) | ((info & kInfoMask) << kInfoShift) |
         ((tid & kTidMask) << kTidShift) | (id & kIdMask);
}

// A remote CQ write carries 48 bits of data in bits 47..0 (tid and id overlap it).
constexpr uint64_t make_cqwrite(uint64_t value, uint64_t status = kOk) {
  return ((status & kStatusMask) << kStatusShift) | (uint64_t{kSrcRemoteRequest} << kSourceShift) |
         (kTypePost << kTypeShift) | (value & kDataMask);
}

constexpr uint64_t overrun_entry() { return uint64_t{1} << kOverrunShift; }

constexpr uint64_t status_of(uint64_t e) { return (e >> kStatusShift) & kStatusMask; }
constexpr uint64_t source_of(uint64_t e) { return (e >> kSourceShift) & kSourceMask; }
constexpr uint64_t type_of(uint64_t e) { return (e >> kTypeShift) & kTypeMask; }
constexpr uint64_t info_of(uint64_t e) { return (e >> kInfoShift) & kInfoMask; }
constexpr uint64_t tid_of(uint64_t e) { return (e >> kTidShift) & kTidMask; }
constexpr uint64_t id_of(uint64_t e) { return e & kIdMask; }

static_assert(status_of(make(kSrcBte, kTypeSmsg, kErrBounds, 0, 7, 9)) == kErrBounds);
static_assert(tid_of(make(kSrcBte, kTypeSmsg, kErrBounds, 0, 0xFFFF, 9)) == 0xFFFF);
static_assert(make_cqwrite(0xFFFFFFFFFFFFFFFFull) >> 63 == 0);

}  // namespace nicemu::abi::cqe
