// Control requests of the collective engine (ce/ce_engine.h): GNI_Ce* of an attached CDM,
// and CE messages of this host's other daemons.
#include "nicemu/daemon/ce/ce_engine.h"
#include "nicemu/daemon/control/cdm_table.h"
#include "nicemu/daemon/control/handlers.h"

#include <unistd.h>

#include <spdlog/spdlog.h>

#include "nicemu/abi/ce_ops.h"
#include "nicemu/abi/gni_values.h"

namespace nicemu::daemon {

using namespace nicemu::abi;

void control::ce(Request& q, const NicInfo& nic, CdmTable& cdms, CeEngine& engine, Counters& ctr) {
  namespace ace = abi::ce;
  const Op op = static_cast<Op>(q.h.op);
  const bool wants_reply =
      op == Op::kCeCreate || op == Op::kCeConfigure || op == Op::kCeDestroy || op == Op::kCeOpen;
  auto bad = [&] {
    ++ctr.malformed_messages;
    if (wants_reply) init_reply<PlainReply>(q.reply, q.h).r.rc = rc::kInvalidParam;
  };
  CdmRegion* cdm = cdms.owned(q.peer);
  // The collective engine is an Aries block; a Gemini NIC has none.
  const bool aries = nic.device_type == gni::kDeviceAries;
  // The post page's ops are numbered outside ctl::Op (abi/ce_ops.h).
  if (op == Op::kCeOpen) {
    ace::CeOpen req;
    if (!parse(q, req)) return bad();
    auto& r = init_reply<ace::CeOpenReply>(q.reply, q.h);
    int fd = -1;
    r.r.rc = !aries ? rc::kIllegalOp : cdm ? engine.open_page(*cdm, r.slot, fd) : rc::kInvalidState;
    if (r.r.rc == rc::kSuccess) {
      r.bytes = ace::kPostPageBytes;
      q.pass_fds = {fd, -1, -1};
    }
    return;
  }
  if (op == Op::kCeRing) {  // one-way
    ace::CeRing req;
    if (!parse(q, req) || !cdm || !aries) return bad();
    return engine.ring();
  }
  switch (op) {
    case Op::kCeCreate: {
      ace::CeCreate req;
      if (!parse(q, req)) return bad();
      auto& r = init_reply<ace::CeCreateReply>(q.reply, q.h);
      r.r.rc = !aries ? rc::kIllegalOp : cdm ? engine.create(*cdm, r.ce_id) : rc::kInvalidState;
      return;
    }
    case Op::kCeConfigure: {
      ace::CeConfigure req;
      if (!parse(q, req)) return bad();
      init_reply<PlainReply>(q.reply, q.h).r.rc = !aries ? rc::kIllegalOp : cdm ? engine.configure(*cdm, req) : rc::kInvalidState;
      return;
    }
    case Op::kCeDestroy: {
      ace::CeDestroy req;
      if (!parse(q, req)) return bad();
      init_reply<PlainReply>(q.reply, q.h).r.rc = !aries ? rc::kIllegalOp : cdm ? engine.destroy(*cdm, req.ce_id) : rc::kInvalidState;
      return;
    }
    case Op::kCePost: {  // one-way: refusals become error results
      ace::CePost req;
      if (!parse(q, req) || !cdm || !aries) return bad();
      return engine.post(*cdm, req);
    }
    case Op::kCeMember: {  // one-way
      ace::CeMember req;
      if (!parse(q, req) || !cdm || !aries) return bad();
      return engine.member(*cdm, req);
    }
    default: {
      // Between the daemons of this host (root or the daemon's own user); the message names
      // its sender, which a local daemon is trusted to give truthfully.
      if (q.peer.uid != 0 && q.peer.uid != geteuid()) return bad();
      uint32_t origin = 0;
      if (q.len < sizeof(ctl::Header) + sizeof origin) return bad();
      std::memcpy(&origin, q.msg + sizeof(ctl::Header), sizeof origin);
      if (const char* why = engine.message(origin, q.h, q.msg, q.len)) {
        ++ctr.malformed_messages;
        spdlog::warn("nic {}: CE message from pid {} dropped: {}", nic.nic_addr, q.peer.pid, why);
      }
      return;
    }
  }
}

}  // namespace nicemu::daemon
