// Memory-handle encoding (gni_mem_handle_t, 16 bytes) — the "format v1" bit layout of the
// fact sheet, with the registration slot in the otherwise unused bits:
//   qword1  51..0  VA >> 12            63..52  MDH: the memory domain (12 bits)
//   qword2  27..0  pages               33..28  page shift (12)
//           41..34 flags               55..42  registration slot (14 bits)
//           63..56 CRC-8 (reflected Dallas/Maxim) of the 15 low bytes
// The MDH names the memory domain of the registering CDM on its node (the daemon numbers
// the attached CDMs 1..4095, never 0). As on the hardware, a memory operation reaches its
// target through (NIC address, MDH) alone, whatever id the EP was bound with; the target
// then validates slot, domain, page, page count, CRC, flags and bounds against the
// domain's daemon-written registration table.
// A virtual-MDH handle (flag VMDH, GNI_MEM_USE_VMDH) carries instead of the memory domain
// an index into the node's vMDH block of the initiator's protection domain; the target's
// daemon knows which CDM registered that index. Its remote addresses are relative to the
// handle's VA: the byte at `remote_addr` is the registration's first page + (remote_addr -
// VA), so a handle rebuilt from a key with VA 0 (libfabric's FI_MR_SCALABLE) addresses
// offsets, and one from GNI_MemRegister addresses virtual addresses as usual.
#pragma once
#include <cstdint>
#include <optional>

namespace nicemu::abi::mdh {

inline constexpr uint32_t kSlotBits = 14;
inline constexpr uint32_t kMaxSlots = 1u << kSlotBits;
inline constexpr uint32_t kGenMask = 0xFFF;       // a registration's generation (not in the handle)
inline constexpr uint32_t kDomainBits = 12;
inline constexpr uint32_t kMaxDomains = 1u << kDomainBits;  // MDH 0 is never issued
inline constexpr uint64_t kPagesUnbounded = 0xFFFFFFF;  // a client-built handle's "any length"
inline constexpr uint32_t kPageShift = 12;

inline constexpr uint32_t kFlagReadOnly = 0x01;
inline constexpr uint32_t kFlagVmdh = 0x02;
inline constexpr uint32_t kFlagNewFormat = 0x80;
inline constexpr uint32_t kVmdhIndices = kMaxDomains;  // the MDH field holds the vMDH index
// How a handle finds its target CDM on a node: the memory domain, or for a vMDH handle its
// index with this bit set (a "route"; never 0 for a valid handle).
inline constexpr uint32_t kVmdhRoute = 0x80000000u;

struct Fields {
  uint64_t va = 0;        // registered start address (page-truncated in the handle)
  uint64_t npages = 0;    // pages covered
  uint32_t domain = 0;    // 12-bit MDH: the registering CDM's memory domain on its node
  uint32_t slot = 0;      // 14-bit registration slot
  uint32_t flags = 0;     // kFlag*
};

constexpr uint8_t crc8_table_entry(uint8_t x) {
  constexpr uint8_t k[8] = {0x5e, 0xbc, 0x61, 0xc2, 0x9d, 0x23, 0x46, 0x8c};
  uint8_t r = 0;
  for (int b = 0; b < 8; ++b)
    if (x & (1u << b)) r ^= k[b];
  return r;
}

constexpr uint8_t crc8(uint64_t q1, uint64_t q2) {
  uint8_t crc = 0;
  for (int i = 0; i < 8; ++i) crc = crc8_table_entry(static_cast<uint8_t>(crc ^ ((q1 >> (8 * i)) & 0xFF)));
  for (int i = 0; i < 7; ++i) crc = crc8_table_entry(static_cast<uint8_t>(crc ^ ((q2 >> (8 * i)) & 0xFF)));
  return crc;
}

constexpr void encode(const Fields& f, uint64_t& q1, uint64_t& q2) {
  q1 = ((f.va >> kPageShift) & ((uint64_t{1} << 52) - 1)) | (uint64_t{f.domain & (kMaxDomains - 1)} << 52);
  q2 = (f.npages & 0xFFFFFFF) | (uint64_t{kPageShift} << 28) | (uint64_t{f.flags & 0xFF} << 34) |
       (uint64_t{f.slot & (kMaxSlots - 1)} << 42);
  q2 |= uint64_t{crc8(q1, q2)} << 56;
}

// The handle of registration `slot` covering [address, address + length): what the daemon
// returns from GNI_MemRegister and what GNI_MemQueryHndls rebuilds from the table, so the
// two are always the same 16 bytes. `read_only` is GNI_MEM_READ_ONLY of the registration.
// `vmdh`: the registration's vMDH index + 1 (0: none), which then takes the MDH field.
constexpr Fields registration_fields(uint64_t address, uint64_t length, uint32_t domain, uint32_t slot,
                                     bool read_only, uint32_t vmdh = 0) {
  Fields f;
  f.va = address & ~((uint64_t{1} << kPageShift) - 1);
  f.npages = (address + length - f.va + (uint64_t{1} << kPageShift) - 1) >> kPageShift;
  f.domain = vmdh ? vmdh - 1 : domain;
  f.slot = slot;
  f.flags = (read_only ? kFlagReadOnly : 0) | (vmdh ? kFlagVmdh : 0);
  return f;
}

// The MDH of a handle without decoding the rest: what finds the target's region.
constexpr uint32_t domain_of(uint64_t q1) { return static_cast<uint32_t>(q1 >> 52) & (kMaxDomains - 1); }
constexpr bool is_vmdh(uint64_t q2) { return (q2 >> 34) & kFlagVmdh; }
// The route of a handle (kVmdhRoute above): what a node resolves to the target CDM.
constexpr uint32_t route_of(uint64_t q1, uint64_t q2) { return domain_of(q1) | (is_vmdh(q2) ? kVmdhRoute : 0); }

// Decodes and checks the CRC; nullopt for a handle that was never produced by encode().
// `lenient_crc`: a client-built handle (page count unbounded) passes without its CRC, for
// memory accesses: libfabric's gni provider leaves the CRC 0 on the handles of its FMA and
// AMO posts ("Mem handle CRC is not validated during FMA operations", its source says),
// and such a handle is checked by its domain, page and bounds at the target anyway.
constexpr std::optional<Fields> decode(uint64_t q1, uint64_t q2, bool lenient_crc = false) {
  if (q1 == 0 && q2 == 0) return std::nullopt;
  const bool crc_ok = static_cast<uint8_t>(q2 >> 56) == crc8(q1, q2 & ((uint64_t{1} << 56) - 1));
  if (!crc_ok && !(lenient_crc && (q2 & 0xFFFFFFF) == kPagesUnbounded)) return std::nullopt;
  if (((q2 >> 28) & 0x3F) != kPageShift) return std::nullopt;
  Fields f;
  f.va = (q1 & ((uint64_t{1} << 52) - 1)) << kPageShift;
  f.domain = static_cast<uint32_t>(q1 >> 52) & (kMaxDomains - 1);
  f.npages = q2 & 0xFFFFFFF;
  f.flags = static_cast<uint32_t>(q2 >> 34) & 0xFF;
  f.slot = static_cast<uint32_t>(q2 >> 42) & (kMaxSlots - 1);
  return f;
}

}  // namespace nicemu::abi::mdh
