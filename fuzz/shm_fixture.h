// Shared pieces of the fuzz targets that drive the daemon's readers of client-writable
// shared memory (docs/security.md, Fuzzing): a real CDM region of this
// process as the daemon makes it on attach, and a check that the daemon wrote nothing
// outside the ranges it may write.
#pragma once
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "fuzz_driver.h"
#include "nicemu/abi/ctl_protocol.h"
#include "nicemu/abi/gni_values.h"
#include "nicemu/abi/shm_layout.h"
#include "nicemu/daemon/cdm/cdm_region.h"

namespace shm_fuzz {

using Reader = fuzz::Reader;

// No process has this pid (above the kernel's pid_max): whatever the daemon would copy to
// or from the CDM's process fails with ESRCH instead of touching the fuzzer's memory.
inline constexpr pid_t kNoPid = 0x7ffffff0;

inline constexpr uint64_t kHeapBytes = 512u << 10;
inline constexpr uint64_t kRegion = nicemu::abi::kRoSize + kHeapBytes;

inline std::unique_ptr<nicemu::daemon::CdmRegion> make_cdm(uint32_t node, uint32_t inst, uint64_t attach_id,
                                                          uint32_t ptag, uint32_t cookie, pid_t pid = kNoPid) {
  nicemu::abi::ctl::Attach a{};
  a.inst_id = inst;
  a.ptag = ptag;
  a.cookie = cookie;
  return std::make_unique<nicemu::daemon::CdmRegion>(node, nicemu::abi::gni::kDeviceAries, a, pid, attach_id,
                                                     kRegion, static_cast<uint32_t>(attach_id),
                                                     std::make_shared<nicemu::daemon::ProcessMdd>(pid));
}

// A registration of `r` in `slot`, as the daemon makes it (libugni writes the same entry).
inline int reg_store(nicemu::daemon::CdmRegion& r, uint32_t slot, const nicemu::daemon::RegSpec& spec,
                     uint32_t dst_cq) {
  nicemu::abi::ctl::MemRegisterReply rep{};
  return r.mdd().store(slot, spec, dst_cq, r.mem_domain(), rep);
}

inline uint32_t make_cq(nicemu::daemon::CdmRegion& r, uint32_t entries = 64) {
  nicemu::abi::ctl::CqCreate req{};
  req.entry_count = entries;
  nicemu::abi::ctl::CqCreateReply rep{};
  if (r.cq_create(req, rep) != nicemu::abi::gni::kSuccess) std::abort();
  return rep.cq_index;
}

// A copy of [base, base + size) taken before the daemon's code runs; after it, every byte
// that changed must lie in one of the ranges allowed (offsets from base). A change
// elsewhere is a stray write: abort, so the fuzzer keeps the input.
class Snapshot {
 public:
  // `slot`: which of the reused copy buffers (snapshots alive at the same time need
  // different ones).
  Snapshot(const char* base, uint64_t size, unsigned slot = 0) : base_(base), size_(size) {
    static std::vector<char> bufs[4];
    std::vector<char>& buf = bufs[slot % 4];
    if (buf.size() < size) buf.resize(size);
    copy_ = buf.data();
    std::memcpy(copy_, base, size);
  }
  Snapshot(const Snapshot&) = delete;
  Snapshot& operator=(const Snapshot&) = delete;
  void allow(uint64_t offset, uint64_t bytes) { allowed_.emplace_back(offset, offset + bytes); }
  void check() const {
    // Page by page with memcmp (cheap), byte by byte only where a page changed.
    for (uint64_t p = 0; p < size_; p += 4096) {
      const uint64_t n = size_ - p < 4096 ? size_ - p : 4096;
      if (std::memcmp(base_ + p, copy_ + p, n) == 0) continue;
      for (uint64_t i = p; i < p + n; ++i) {
        if (base_[i] == copy_[i]) continue;
        bool ok = false;
        for (auto [b, e] : allowed_) ok |= i >= b && i < e;
        if (!ok) {
          std::fprintf(stderr, "stray write at offset %llu\n", static_cast<unsigned long long>(i));
          std::abort();
        }
      }
    }
  }

 private:
  const char* base_;
  uint64_t size_;
  char* copy_;
  std::vector<std::pair<uint64_t, uint64_t>> allowed_;
};

}  // namespace shm_fuzz
