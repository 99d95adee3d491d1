// The ordering model (docs/ordering.md) as pure functions: the class of a transaction from
// the node's forced mode, the post's delivery mode and the target registration's PI flags,
// and whether a new transaction may pass an earlier one of the same initiator that is still
// in flight. The reorder engine (fault_engine.cpp) holds transactions by these rules.
#pragma once
#include <cstdint>

#include "gni_pub.h"
#include "nicemu/abi/fault_layout.h"

namespace nicemu::ugni::ordering {

enum Class : uint8_t {
  kStrict = abi::fault::kOrderStrict,
  kDefault = abi::fault::kOrderDefault,
  kRelaxed = abi::fault::kOrderRelaxed,
};

// `forced` is the fault configuration's ordering (kOrderAuto: decide per post).
constexpr Class class_of(uint32_t forced, uint16_t dlvr_mode, uint32_t target_reg_flags) {
  if (forced != abi::fault::kOrderAuto) return static_cast<Class>(forced);
  if ((dlvr_mode & GNI_DLVMODE_IN_ORDER) == GNI_DLVMODE_IN_ORDER) return kStrict;
  if (target_reg_flags & GNI_MEM_STRICT_PI_ORDERING) return kStrict;  // STRICT wins over RELAXED
  if (target_reg_flags & GNI_MEM_RELAXED_PI_ORDERING) return kRelaxed;
  return kDefault;
}

// SMSG: the NIC's delivery mode (GNI_SmsgSetDeliveryMode); no target registration applies.
constexpr Class smsg_class_of(uint32_t forced, uint16_t smsg_dlvr_mode) {
  return class_of(forced, smsg_dlvr_mode, 0);
}

// One transaction as the model sees it.
struct Txn {
  Class cls = kDefault;
  bool posted = true;        // PUT, SMSG, CQ write; false for GET and AMO
  bool smsg = false;
  const void* channel = nullptr;  // the SMSG endpoint
};

// Whether `x`, posted later, may take effect before the earlier `y` of the same initiator.
constexpr bool may_pass(const Txn& y, const Txn& x) {
  if (x.cls == kStrict || y.cls == kStrict) return false;
  // Packets of one SMSG channel may overtake each other: the receiver takes messages in
  // sequence order (a retransmitted message leaves a gap the later ones wait behind).
  if (x.smsg && y.smsg && x.channel == y.channel) return true;
  if (x.cls == kRelaxed || y.cls == kRelaxed) return true;
  return y.posted && !x.posted;  // default: non-posted may pass posted
}

}  // namespace nicemu::ugni::ordering
