// Fuzz target: descriptor/access validation (nicemu/abi/region_access.h), the one check
// every remote access goes through, on a synthetic CDM region in memory whose read-only
// tables hold what the input says (a peer's region is untrusted shared memory).
//
// Input: mode byte; registration slot (u16); a RegEntry (64 bytes, written raw into the
// slot); the access: address (u64), length (u64), write (u8); the handle (16 bytes, used
// when mode bit 0 is clear; set: the harness builds the handle the daemon would have
// returned for the entry); the rest: SegEntry records written at the entry's seg_first.
// A translation that succeeds must cover exactly the requested bytes.
#include <cstdlib>
#include <cstring>

#include "fuzz_driver.h"
#include "nicemu/abi/region_access.h"

namespace abi = nicemu::abi;

using fuzz::Reader;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static constexpr uint64_t kSize = abi::kRoSize + (uint64_t{1} << 20);
  static char* region = static_cast<char*>(std::aligned_alloc(abi::kPageSize, kSize));
  static bool zeroed = (std::memset(region, 0, kSize), true);
  (void)zeroed;

  Reader in{data, size};
  const uint8_t mode = in.take<uint8_t>();
  const uint32_t slot = in.take<uint16_t>() % abi::kRegSlots;
  uint8_t raw[sizeof(abi::RegEntry)];
  std::memset(raw, 0, sizeof raw);
  for (auto& b : raw) b = in.take<uint8_t>();
  raw[0] &= ~1u;  // an even seqlock sequence: a settled entry
  const uint64_t addr = in.take<uint64_t>(), len = in.take<uint64_t>();
  const bool write = in.take<uint8_t>() & 1;
  uint64_t q1 = in.take<uint64_t>(), q2 = in.take<uint64_t>();

  char* entry = region + abi::kRegTableOffset + uint64_t{slot} * sizeof(abi::RegEntry);
  std::memcpy(entry, raw, sizeof raw);
  const auto* e = reinterpret_cast<const abi::RegEntry*>(entry);
  if (mode & 1) {
    auto f = abi::mdh::registration_fields(e->address, e->length, e->domain, slot, e->flags & abi::gni::kMemReadOnly);
    abi::mdh::encode(f, q1, q2);
  }
  // Segments: as many as the rest of the input holds, from seg_first on (clamped).
  const uint32_t first = e->seg_first % abi::kSegSlots;
  char* segs = region + abi::kSegTableOffset + uint64_t{first} * sizeof(abi::SegEntry);
  size_t nseg = in.n / sizeof(abi::SegEntry);
  if (nseg > abi::kSegSlots - first) nseg = abi::kSegSlots - first;
  std::memcpy(segs, in.p, nseg * sizeof(abi::SegEntry));

  uint32_t cq = 0;
  const uint64_t st = abi::region_check_access(region, q1, q2, addr, len, write, &cq);
  abi::Extents ext;
  const uint64_t st2 = abi::region_translate(region, q1, q2, addr, len, write, &cq, ext);
  if (e->seg_count == 0 && st != st2) std::abort();  // the two checks disagree
  if (st2 == abi::cqe::kOk) {
    uint64_t sum = 0;
    for (size_t i = 0; i < ext.size(); ++i) {
      if (ext[i].len == 0 || ext[i].len > len) std::abort();
      sum += ext[i].len;
    }
    if (sum != len) std::abort();  // the pieces must cover the access exactly
  }

  std::memset(entry, 0, sizeof(abi::RegEntry));
  std::memset(segs, 0, nseg * sizeof(abi::SegEntry));
  return 0;
}
