// How a CDM region (shm_layout.h) travels and is mapped: three memfds — the read-only
// section (header and CQ descriptors), the process's MDD table (registrations, segments) and
// the heap — mapped back to back so that region offsets stay what shm_layout.h says.
//
// Why three: a process holding a memfd may map any part of it with any protection the file
// allows. The daemon maps the read-only memfd writable, then seals it with
// F_SEAL_FUTURE_WRITE: its own mapping keeps working, while every later mmap(PROT_WRITE,
// MAP_SHARED), mprotect to PROT_WRITE of a shared mapping, and write() on it fail for
// everybody. The MDD memfd is sealed the same way by its owner, right after the owner mapped
// it writable (kMddOwnerSeals): from then on the owner alone can change its registrations,
// and the daemon hands it to peers only once it carries that seal. Shared by the daemon, its
// BTE engine and libugni.
#pragma once
#include <fcntl.h>
#include <sys/mman.h>

#include <cstdint>

#include "nicemu/abi/shm_layout.h"

namespace nicemu::abi {

// Seals the daemon puts on each memfd: sizes fixed; no new writers of the read-only part.
inline constexpr int kRoSeals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE | F_SEAL_SEAL;
inline constexpr int kHeapSeals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;
// The daemon's seals on a fresh MDD memfd (its size is fixed: a shrunk file would fault its
// readers), then the owner's once its writable mapping exists.
inline constexpr int kMddDaemonSeals = F_SEAL_SHRINK | F_SEAL_GROW;
inline constexpr int kMddOwnerSeals = F_SEAL_FUTURE_WRITE | F_SEAL_SEAL;

// Maps `size` bytes from two memfds at one reserved address range: [0, ro_size) from
// `ro_fd` with `ro_prot` (PROT_READ for everybody but the daemon before sealing), the rest
// read-write from `rw_fd`. Returns the base, or nullptr (nothing left mapped). The MSGQ
// segment (msgq_layout.h) travels the same way, with its own ro_size.
inline char* map_split(int ro_fd, int rw_fd, uint64_t ro_size, uint64_t size, int ro_prot = PROT_READ) {
  if (size <= ro_size || ro_size == 0 || ro_fd < 0 || rw_fd < 0) return nullptr;
  void* base = mmap(nullptr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (base == MAP_FAILED) return nullptr;
  char* b = static_cast<char*>(base);
  if (mmap(b, ro_size, ro_prot, MAP_SHARED | MAP_FIXED, ro_fd, 0) == MAP_FAILED ||
      mmap(b + ro_size, size - ro_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, rw_fd, 0) == MAP_FAILED) {
    munmap(base, size);
    return nullptr;
  }
  return b;
}

// A CDM region of `size` bytes: the read-only memfd at [0, kRegTableOffset) and
// [kCqTableOffset, kRoSize) (same offsets in the file), the MDD memfd at [kRegTableOffset,
// kCqTableOffset) with `mdd_prot`, the heap after. Returns the base, or nullptr.
inline char* map_region(int ro_fd, int mdd_fd, int heap_fd, uint64_t size, int ro_prot = PROT_READ,
                        int mdd_prot = PROT_READ) {
  char* b = map_split(ro_fd, heap_fd, kRoSize, size, ro_prot);
  if (!b) return nullptr;
  if (mdd_fd < 0 || mmap(b + kRegTableOffset, kMddBytes, mdd_prot, MAP_SHARED | MAP_FIXED, mdd_fd, 0) == MAP_FAILED) {
    munmap(b, size);
    return nullptr;
  }
  return b;
}

// True if `fd` (a read-only or MDD memfd) carries the seals that keep the caller from writing
// it: a client refuses a region whose tables their owner (or anybody else) could rewrite.
inline bool fd_write_sealed(int fd) {
  int s = fcntl(fd, F_GET_SEALS);
  return s >= 0 && (s & (F_SEAL_FUTURE_WRITE | F_SEAL_SEAL)) == (F_SEAL_FUTURE_WRITE | F_SEAL_SEAL);
}

// True if `ro_fd` carries the seals that make the read-only section read-only for the
// caller: a client refuses a region whose table its owner could rewrite.
inline bool ro_sealed(int ro_fd) { return fd_write_sealed(ro_fd); }

}  // namespace nicemu::abi
