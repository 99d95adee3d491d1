// The text form of a fault configuration, shared by the daemon (--fault, the `fault` config
// key) and `nicemuctl fault set`. Tokens separated by spaces or commas:
//   on | off                      enable / disable injection (a spec with rules enables it,
//                                 unless it says on or off: the last of those decides)
//   seed=N                        generator seed (default: chosen at random and logged)
//   KIND.ACTION=P[@PEER]          probability P (0..1) of ACTION for KIND, optionally to one
//                                 peer NIC address; KIND: smsg put get amo rdma_put rdma_get
//                                 datagram packet fma (put+get+amo) rdma (both) any;
//                                 ACTION: drop dup delay corrupt error exhaust
//   nth=KIND:N:ACTION             the N-th transaction of KIND (per initiating CDM) gets ACTION
//   link_down=PEER@A..Bms         link to PEER (or *) down from A ms to B ms after publication
//   ordering=auto|strict|default|relaxed
//   reorder=P                     probability that a transaction others may pass is held
//   window=N                      most transactions one CDM holds at a time
//   delay_us=MIN..MAX             holding time of delayed / reordered transactions
//   retransmit_us=N               SMSG retransmit delay after a drop or corruption
//   error_done=P                  probability a failed PUT/AMO took effect anyway
//   max_retrans=N                 SMSG attempts before a link-down window exhausts a send
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "nicemu/abi/fault_layout.h"

namespace nicemu::fault {

// The configuration with everything off and the defaults of the tunables.
abi::fault::Config default_config();

// Parses `spec` on top of `cfg` (so `nicemuctl fault set` can change one knob). False with
// `error` naming the offending token. `seed_given` is set if the spec named a seed.
bool parse_spec(std::string_view spec, abi::fault::Config& cfg, std::string& error, bool* seed_given = nullptr);

// The canonical text of `cfg` (parse_spec of it gives `cfg` back).
std::string to_spec(const abi::fault::Config& cfg);

// Checks a configuration that came from an untrusted source (a control message).
bool valid_config(const abi::fault::Config& cfg, std::string& error);

// What in `cfg` is stress beyond what Gemini/Aries can do, or has no effect, one line each
// (docs/fault-injection.md, "What the hardware can produce"); empty when everything in it
// is hardware-like. nicemuctl fault prints these, so a client is not judged by mistake.
std::vector<std::string> hardware_notes(const abi::fault::Config& cfg);

}  // namespace nicemu::fault
