// Queries over memory handles and this NIC's registrations (fact sheet §10.2):
// GNI_MemQueryHndls walks the daemon-written, read-only registration table of our own
// region (foMPI uses it to find the handle of an address it registered before), and
// GNI_MemHndlQueryAttr reads the flag bits of a handle (§10.4 layout, nicemu/abi/mem_handle.h).
#include <cstring>

#include "internal.h"

using namespace nicemu;
using namespace nicemu::ugni;
namespace mdh = nicemu::abi::mdh;

extern "C" {

// Pass a zeroed handle to get the first registration, then the previous result to get the
// next; NO_MATCH after the last. The order is the table's slot order. Only the NIC handle
// form is supported: nicemu has no NIC device file, so `fd` is ignored.
gni_return_t GNI_MemQueryHndls(gni_nic_handle_t nic_hndl, int fd, gni_mem_handle_t* mem_hndl, uint64_t* address,
                               uint64_t* length) {
  (void)fd;
  Nic* n = as_nic(nic_hndl);
  if (!n || !mem_hndl || !address || !length) return GNI_RC_INVALID_PARAM;
  *address = 0;  // the API's convention: zero on every error
  *length = 0;
  uint32_t first = 0;
  if (mem_hndl->qword1 != 0 || mem_hndl->qword2 != 0) {
    // The previous result: it must still name a live registration of this NIC.
    auto f = mdh::decode(mem_hndl->qword1, mem_hndl->qword2);
    abi::RegEntry e;
    if (!f || !n->self->read_reg(f->slot, e) || abi::region_check_entry(*f, e, e.address, 0, false) != abi::cqe::kOk)
      return GNI_RC_INVALID_STATE;
    first = f->slot + 1;
  }
  for (uint32_t slot = first; slot < abi::kRegSlots; ++slot) {
    abi::RegEntry e;
    if (!n->self->read_reg(slot, e) || e.state != abi::kRegLive) continue;
    // The same 16 bytes GNI_MemRegister returned for it (the daemon builds them alike).
    mdh::encode(mdh::registration_fields(e.address, e.length, e.domain, slot, e.flags & GNI_MEM_READ_ONLY, e.vmdh),
                mem_hndl->qword1, mem_hndl->qword2);
    *address = e.address;
    *length = e.length;
    return GNI_RC_SUCCESS;
  }
  return GNI_RC_NO_MATCH;
}

// Tests one attribute bit of a handle. The handle is validated by its CRC (it may be a
// peer's, so there is no table to look it up in); the attribute values 1..7 name the flag
// bits 0x01..0x40 of the layout (READONLY, VMDH, MRT, GART, IOMMU, PCI_IOMMU, CLONE).
gni_return_t GNI_MemHndlQueryAttr(gni_mem_handle_t* mem_hndl, gni_mem_handle_attr_t attr, int* yesno) {
  if (!mem_hndl || !yesno) return GNI_RC_INVALID_PARAM;
  int a;
  static_assert(sizeof(a) == sizeof(attr));
  std::memcpy(&a, &attr, sizeof a);  // an enum argument is untrusted input too
  if (a < GNI_MEMHNDL_ATTR_READONLY || a > GNI_MEMHNDL_ATTR_CLONE) return GNI_RC_INVALID_PARAM;
  auto f = mdh::decode(mem_hndl->qword1, mem_hndl->qword2);
  if (!f) return GNI_RC_INVALID_PARAM;
  *yesno = (f->flags & (1u << (a - 1))) ? 1 : 0;
  return GNI_RC_SUCCESS;
}

}  // extern "C"
