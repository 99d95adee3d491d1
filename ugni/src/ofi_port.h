// The ofi fabric (docs/ofi-fabric.md): when the daemon runs with
// fabric_data = ofi, each attached CDM opens a libfabric RDM endpoint of its own and moves
// the data of its FMA/RDMA PUT and GET to other hosts itself (fi_write / fi_read), rank to
// rank, remote events of PUTs as remote CQ data (fi_writedata) and sync flags as a second
// write. AMOs, CQ writes and GETs' remote events go as messages (nicemu/abi/ofi_msg.h) that
// the target's port executes against its own registration table, AMOs under the AMO lock
// every path takes. The port is driven by an application thread polling an empty CQ, else
// by the CDM's progress thread (ofi_poll below). Everything else across hosts keeps going through the daemons
// (remote_post.cpp).
//
// Memory handles: a registration made by the library (GNI_MemRegister, not vMDH) is
// registered with the provider too, over its whole pages [VA, VA + pages * 4 KiB) as the
// handle names them, with a requested key derived from the handle's 128 bits (ofi_key), so
// a peer needs nothing beyond the gni_mem_handle_t it already has: the key from the handle,
// the address as is (FI_MR_VIRT_ADDR) or as an offset from the handle's VA. Providers
// that insist on keys of their own (FI_MR_PROV_KEY) are not used: the CDM stays on the
// daemons' path. A stale handle (its registration gone or replaced) has a key the provider
// does not know: the post completes with a protection error, never a write.
//
// Per peer: the first post to a (node, memory domain) asks our daemon for the target CDM's
// address (OfiLookup; only a CDM of our credential answers); a peer without one (a daemon
// on udp, a library without libfabric) keeps the daemons' path, asked again after a second.
// Without libfabric at build time every call here answers "not taken".
#pragma once
#include <cstdint>

#include "gni_pub.h"
#include "nicemu/abi/ctl_protocol.h"

namespace nicemu::ugni {

struct Nic;
struct Ep;
struct Cq;

// Opens the CDM's endpoint if its daemon said ofi (AttachReply). Failure is not an error of
// the attach: said once on stderr, and the CDM uses the daemons' path.
void ofi_open(Nic* n, const abi::ctl::AttachReply& rep);
// Closes it (GNI_CdmDestroy): posts still in flight complete no more.
void ofi_close(Nic* n);
// A registration of the library: registered with the provider too (no-op without a port).
void ofi_register(Nic* n, const gni_mem_handle_t& h, bool read_only);
void ofi_deregister(Nic* n, const gni_mem_handle_t& h);
// A post for another host's node: true if taken here (its events come from the port's
// progress thread, errors included); false: the caller hands it to the daemon.
bool ofi_post(Ep* ep, Cq* cq, const gni_post_descriptor_t* d, uint16_t kind, uint16_t engine, int32_t tid);
// An application thread found a CQ of the CDM empty: it drives the provider itself (reads
// its CQ without blocking, dispatches as the progress thread does), if no other thread is
// driving it; the progress thread keeps away while the application polls. Cheap without a port.
void ofi_poll(Nic* n);
// The application thread stops polling (it goes to sleep on a CQ's futex): the progress
// thread drives again at once.
void ofi_idle(Nic* n);

// The provider key of a handle: its two qwords mixed (splitmix64), so any change of VA,
// pages, domain, slot or flags gives another key.
constexpr uint64_t ofi_key(uint64_t q1, uint64_t q2) {
  auto mix = [](uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  return mix(q1 ^ mix(q2));
}

}  // namespace nicemu::ugni
