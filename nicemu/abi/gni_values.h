// The few uGNI numeric values the NIC itself needs (reply codes, memory flags). The daemon
// sits below libugni and does not include gni_pub.h; libugni static_asserts that these
// agree with its public header.
#pragma once
#include <cstdint>

namespace nicemu::abi::gni {

enum Rc : int32_t {
  kSuccess = 0,
  kNotDone = 1,
  kInvalidParam = 2,
  kErrorResource = 3,
  kTimeout = 4,
  kPermissionError = 5,
  kDescriptorError = 6,
  kAlignmentError = 7,
  kInvalidState = 8,
  kNoMatch = 9,
  kSizeError = 10,
  kTransactionError = 11,
  kIllegalOp = 12,
  kErrorNomem = 13,
};

inline constexpr uint32_t kMemReadOnly = 0x1;
inline constexpr uint32_t kMemUseVmdh = 0x2;
inline constexpr uint32_t kMemReserveRegion = 0x200;
inline constexpr uint32_t kMemUpdateRegion = 0x400;

// gni_post_state_t
inline constexpr uint32_t kPostPending = 0;
inline constexpr uint32_t kPostCompleted = 1;
inline constexpr uint32_t kPostError = 2;
inline constexpr uint32_t kPostTimeout = 3;
inline constexpr uint32_t kPostTerminated = 4;
inline constexpr uint32_t kDeviceGemini = 0;
inline constexpr uint32_t kDeviceAries = 1;

}  // namespace nicemu::abi::gni
