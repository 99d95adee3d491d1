// The ofi fabric (docs/ofi-fabric.md): when the daemon runs with
// fabric_data = ofi, each attached CDM opens a libfabric RDM endpoint of its own and moves
// the data of its FMA/RDMA PUT and GET to other hosts itself (fi_write / fi_read), rank to
// rank, remote events of PUTs as remote CQ data (fi_writedata) and sync flags as a second
// write. AMOs, CQ writes and GETs' remote events go as messages (nicemu/abi/ofi_msg.h) that
// the target's port executes against its own registration table, AMOs under the AMO lock
// every path takes; chained posts (FMA and CQ writes) member by member (ofi_chain_*). SMSG channels go as
// frames the receiver's port writes into the mailbox (smsg_ofi.h). A post that may not pass
// what is in flight to its peer on the other path is held, not waited for (ofi_order.h).
// A post that fails TRANSIENT is judged first: PEER_GONE if the target CDM died (ofi_peer_check.h). At NIC
// down the posts in flight fail NIC_DOWN and a target serves nothing (ofi_nic_down). The port
// is driven by an application thread polling an empty CQ (or waiting for one while posts
// are held), else by the CDM's progress thread (ofi_poll, ofi_wait below). Everything else across hosts keeps going through the daemons
// (remote_post.cpp).
//
// Memory handles: a registration made by the library (GNI_MemRegister, not vMDH) is
// registered with the provider too, over its whole pages [VA, VA + pages * 4 KiB) as the
// handle names them, with a requested key derived from the handle's 128 bits (ofi_key), so
// a peer needs nothing beyond the gni_mem_handle_t it already has: the key from the handle,
// the address as is (FI_MR_VIRT_ADDR) or as an offset from the handle's VA. A stale handle
// (its registration gone or replaced) has a key the provider does not know: the post
// completes with a protection error, never a write.
// Providers whose keys are their own (FI_MR_PROV_KEY: verbs, efa): the first RMA post to a
// (peer CDM, handle) asks the target's port for the key (ofi_msg.h kKey) and is held (with
// the posts to that peer behind it) until the answer; the answer is cached per (peer
// address, handle) and dropped when a post through it fails (a registration replaced at the
// same handle has another key: the target's provider refuses the old one). PROTECTION
// (no such registration at the target) fails the held posts unwritten. Without FI_MSG such
// a provider is not used. FI_MR_LOCAL: every provider operation carries the descriptor of a
// registration covering its local buffer: the GNI registration the post names, else one of
// the port's (a pool of registered buffers for small sends, copied in, or the buffer
// registered for the operation's life). client_ofi_mr_mode emulates both on providers that
// never demand them (tests).
//
// Per peer: the first post to a (node, memory domain) asks our daemon for the target CDM's
// address (OfiLookup; only a CDM of our credential answers); a peer without one (a daemon
// on udp, a library without libfabric) keeps the daemons' path, asked again after a second.
// Without libfabric at build time every call here answers "not taken".
#pragma once
#include <cstdint>
#include <string>

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
// Our NIC is down (its daemon died or shut down): every post still in flight with the port
// completes NIC_DOWN now, once (its provider completion later posts nothing), as the posts
// our daemon held do; peers' requests are answered PEER_GONE unexecuted and the provider
// registrations closed. True if it posted events (the first call only).
bool ofi_nic_down(Nic* n);
// A registration of the library: registered with the provider too (no-op without a port).
void ofi_register(Nic* n, const gni_mem_handle_t& h, bool read_only);
void ofi_deregister(Nic* n, const gni_mem_handle_t& h);
// A post for another host's node: kYes if taken here (its events come from the port's
// progress thread, errors included), issued now or held until what it may not pass to its
// peer took effect (ofi_order.h: the call never waits for that); kNo: the caller hands it
// to the daemon; kFull: not taken, the port holds as many posts as it may (the caller
// returns GNI_RC_ERROR_RESOURCE).
enum class OfiTaken : uint8_t { kNo, kYes, kFull };
OfiTaken ofi_post(Ep* ep, Cq* cq, const gni_post_descriptor_t* d, uint16_t kind, uint16_t engine, int32_t tid);
// An application thread found a CQ of the CDM empty: it drives the provider itself (reads
// its CQ without blocking, dispatches as the progress thread does), if no other thread is
// driving it; the progress thread keeps away while the application polls. Cheap without a port.
// `wait`: if another thread is driving it, wait for it to finish its dispatch and read the
// provider's CQ once more (GNI_SmsgGetNext on an empty mailbox: a message whose sender already
// has its local completion is then in the mailbox, as GNI promises).
void ofi_poll(Nic* n, bool wait = false);
// An application thread is about to sleep waiting for a CQ of the CDM: if the port holds
// posts (ofi_order.h), it sleeps in the provider instead (fi_cq_sread, at most 1 ms and
// `max_ns`), drives it and returns true; the caller looks at its CQ again. False: nothing
// held (or no port, or a provider CQ without a wait object): the caller sleeps as before.
bool ofi_wait(Nic* n, uint64_t max_ns);
// The application thread stops polling (it goes to sleep on a CQ's futex): the progress
// thread drives again at once.
void ofi_idle(Nic* n);

// Chained posts (GNI_CtPostFma, GNI_CtPostCqWrite: ct_requester.cpp) whose members for
// other hosts all go rank to rank: ofi_chain_takes says whether member `m` (a plain descriptor of the chain's type
// and event mode, on its own EP) would; if every one would, ofi_chain_open, ofi_chain_post
// per member and ofi_chain_close with the first same-host member that failed. The chain's
// one local event (the first descriptor's CQ mode, `local_event`, `tid`) comes when the last
// member is done, with the status of the lowest-indexed member that failed, as the daemons
// post it; remote events are per member. A member the port no longer takes when posted (its
// peer forgotten meanwhile) fails TRANSIENT.
struct OfiChain;
bool ofi_chain_takes(Ep* ep, const gni_post_descriptor_t* m, uint16_t kind);
OfiChain* ofi_chain_open(Nic* n, Cq* cq, const gni_post_descriptor_t* first, uint32_t local_event, int32_t tid);
void ofi_chain_post(OfiChain* c, Ep* ep, const gni_post_descriptor_t* m, uint16_t kind, uint32_t index);
void ofi_chain_close(OfiChain* c, uint32_t fail_index, uint64_t fail_status);

// What SMSG over the ofi fabric (smsg_ofi.h) uses of the port. A send's context: the
// provider's part first, then what the port's completion handling dispatches on; `done` runs
// once, on whichever thread drives the CQ, with cqe::kOk or the error's CQE status.
struct OfiSendCtx {
  alignas(8) unsigned char provider[64];  // fi_context2
  void* unused = nullptr;
  uint8_t kind = 0;  // set by ofi_send
  void (*done)(Nic* n, OfiSendCtx* c, uint64_t status) = nullptr;
  // The port's: the registration lent to the send's buffer (FI_MR_LOCAL), given back before `done`.
  void* lent_mr = nullptr;
  void* lent_pool = nullptr;
  uint32_t lent_slot = 0;
};
// The port takes messages (FI_MSG) of up to `bytes`.
bool ofi_msgs(Nic* n, size_t bytes);
// A peer CDM's address (as for posts: OfiLookup), or the one a peer named (fi_av_insert).
bool ofi_peer(Nic* n, uint32_t node, uint32_t route, uint64_t& addr);
bool ofi_insert(Nic* n, const uint8_t* name, uint32_t len, uint64_t& addr);
// Forgets a peer's address: the next ofi_peer asks our daemon afresh.
void ofi_forget_peer(Nic* n, uint32_t node, uint32_t route);
// The verdict's question (ofi_peer_check.h), for MSGQ: asks our daemon (blocks: never from
// the thread driving the port) which CDM of our credential (node, route) names now. 1: one
// lives, its address in `addr`; 0: none; -1: no answer.
int ofi_ask_route(Nic* n, uint32_t node, uint32_t route, std::string& addr);
// The address an AV entry of ofi_peer was made from (empty if unknown).
std::string ofi_peer_name(Nic* n, uint64_t dest);
// Our endpoint's name (fi_getname) into `out` (kOfiAddrMax bytes); its length, 0 without a port.
uint32_t ofi_self_name(Nic* n, uint8_t* out);
// Sends `len` bytes (read until `done`); `patient`: a full transmit queue is retried for 2 s
// (application threads), else tried a few times (the thread driving the CQ must not wait on
// itself). cqe::kOk: posted, `done` will run; else the status, and `done` will not run.
uint64_t ofi_send(Nic* n, uint64_t dest, const void* buf, size_t len, OfiSendCtx* c, bool patient);

// The provider key of a handle: its two qwords mixed (splitmix64), so any change of VA,
// pages, domain, slot or flags gives another key.
// splitmix64's finaliser: keys, and the channel and stream names of SMSG and MSGQ over ofi.
constexpr uint64_t ofi_mix(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

constexpr uint64_t ofi_key(uint64_t q1, uint64_t q2) { return ofi_mix(q1 ^ ofi_mix(q2)); }

}  // namespace nicemu::ugni
