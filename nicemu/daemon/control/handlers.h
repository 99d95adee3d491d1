// The control handlers, by area (one file each in control/): functions of one request over
// the services they need, which the node owns and passes in (node.cpp's dispatch table).
// Each fills the request's reply (control/request.h), or none for a one-way message.
#pragma once
#include <functional>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "nicemu/daemon/control/request.h"

namespace nicemu::daemon {

class BandwidthInjection;
class BteEngine;
class CdmRegion;
class CdmTable;
class CeEngine;
class Credentials;
class DatagramMatcher;
class FabricPort;
class FaultSettings;
class MsgqRelay;
class MsgqSegments;
class OfiDirectory;
class Quotas;
class RegionDirectory;
class RemoteRequester;
class SmsgRelay;
class StatsPage;
class VmdhTable;

// What the handlers know of the NIC they serve.
struct NicInfo {
  uint32_t nic_addr = 0;
  uint32_t device_type = 0;
  uint64_t region_size = 0;
  bool allow_any_credential = false;
  uint32_t fabric_data = 0;  // abi::ctl::kFabricData* (the fabric_data setting)
  std::string ofi_provider;  // with ofi: the provider its CDMs open (ofi_provider setting)
};

namespace control {

// credentials.cpp: job and DRC credentials, attach, hello, shutdown.
void hello(Request& q, const NicInfo& nic);
void attach(Request& q, const NicInfo& nic, Credentials& creds, CdmTable& cdms, Quotas& quotas, BteEngine& bte,
            StatsPage& stats, Counters& ctr);
void cred(Request& q, Credentials& creds, Counters& ctr);
void drc(Request& q, Credentials& creds, Counters& ctr);
// DRC messages from another daemon of this host (DrcState, DrcAck, DrcTableAsk, DrcTableEnd).
void drc_peer(Request& q, Credentials& creds, Counters& ctr);
void shutdown(Request& q, bool& requested);

// memory.cpp: registrations, CQs, peer lookups, mailboxes, the BTE ring, bandwidth injection.
void mem_register(Request& q, const NicInfo& nic, CdmTable& cdms, VmdhTable& vmdh, Counters& ctr);
void mem_register_segments(Request& q, const NicInfo& nic, CdmTable& cdms, VmdhTable& vmdh, Counters& ctr);
void mem_deregister(Request& q, CdmTable& cdms, VmdhTable& vmdh, Counters& ctr);
void reg_budget(Request& q, CdmTable& cdms, Quotas& quotas, Counters& ctr);
void cq_create(Request& q, CdmTable& cdms, Quotas& quotas, Counters& ctr);
void cq_destroy(Request& q, CdmTable& cdms, Counters& ctr);
void peer_lookup(Request& q, const NicInfo& nic, Credentials& creds, CdmTable& cdms, Counters& ctr);
void mbox_open(Request& q, Credentials& creds, CdmTable& cdms, Quotas& quotas, Counters& ctr);
void bte_open(Request& q, CdmTable& cdms, BteEngine& bte, Counters& ctr);
void bi_config_set(Request& q, BandwidthInjection& bi, Counters& ctr);
void bi_config_get(Request& q, BandwidthInjection& bi, Counters& ctr);

// datagram.cpp: a CDM's posts, and matching messages of this host's other daemons.
void dgram_open(Request& q, CdmTable& cdms, const Quotas& quotas, Counters& ctr);
void dgram_cancel(Request& q, CdmTable& cdms, DatagramMatcher& dgrams, Counters& ctr);
void datagram(Request& q, CdmTable& cdms, DatagramMatcher& dgrams, Quotas& quotas, Counters& ctr);

// msgq.cpp: joining the domain's segment, its connections, lookups, sends to other hosts.
void msgq(Request& q, const NicInfo& nic, Credentials& creds, CdmTable& cdms, MsgqSegments& segs, FabricPort& port,
          MsgqRelay& relay, Counters& ctr);

// remote.cpp: memory operations and SMSG relays towards other hosts; memory operations on
// this host that the initiator may not do itself (the BTE engine runs them, bte_proxy.h).
void remote_post(Request& q, CdmTable& cdms, BteEngine& bte, RemoteRequester& out, SmsgRelay& smsg, Counters& ctr);
void take_remote_post(Request& q, CdmRegion* cdm, BteEngine& bte, RemoteRequester& out, Counters& ctr);
void smsg_relay_open(Request& q, CdmTable& cdms, SmsgRelay& smsg, Counters& ctr);
void smsg_relay_note(Request& q, CdmTable& cdms, SmsgRelay& smsg, Counters& ctr);
// The ofi fabric's addresses (remote/ofi_directory.h): a CDM publishes its own, looks up a
// peer CDM's on another host (answered when that host's daemon has).
void ofi(Request& q, CdmTable& cdms, FabricPort& port, OfiDirectory& dir, Counters& ctr);

// ce.cpp: GNI_Ce* of an attached CDM, and CE messages of this host's other daemons.
void ce(Request& q, const NicInfo& nic, CdmTable& cdms, CeEngine& engine, Counters& ctr);

// fault.cpp: nicemuctl fault.
void fault(Request& q, FaultSettings& settings, Counters& ctr);

// status.cpp: the node's status document, in pages; `document` makes it for a viewer.
void status(Request& q, const std::function<nlohmann::json(const Peer&)>& document, Counters& ctr);

}  // namespace control
}  // namespace nicemu::daemon
