// Reassembly of messages cut into records (segmentation, wire_protocol.h): records come in
// order from the reliable channel; fragments with kRecordMore are appended until the last
// one. A stream that would exceed kMaxMessage, or a fragment whose type differs from the
// message's first, is a protocol error: the partial message is discarded and counted, never
// delivered. The buffer (kMaxMessage bytes) is the owner's: the reliable channel keeps it in
// a mapping it gives back to the kernel when idle.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "nicemu/abi/wire_protocol.h"

namespace nicemu::fabric {

class Reassembly {
 public:
  // `buf`: kMaxMessage bytes, outliving this object.
  explicit Reassembly(uint8_t* buf = nullptr) : buf_(buf) {}

  enum class Result : uint8_t { kPartial, kComplete, kError };
  // Adds one in-order record. On kComplete, message()/size()/type() name the message until
  // the next add().
  Result add(uint8_t type, uint8_t flags, const uint8_t* data, size_t len) {
    if (done_) {
      size_ = 0;
      done_ = false;
    }
    if (size_ > 0 && type != type_) return fail();
    if (size_ + len > abi::wire::kMaxMessage) return fail();
    if (len) std::memcpy(buf_ + size_, data, len);
    size_ += len;
    type_ = type;
    partial_ = true;
    if (flags & abi::wire::kRecordMore) return Result::kPartial;
    done_ = true;
    partial_ = false;
    return Result::kComplete;
  }
  // The sender skipped records (gave them up): a message in progress can never complete.
  void abandon() {
    size_ = 0;
    partial_ = done_ = false;
  }
  bool in_progress() const { return partial_; }
  const uint8_t* message() const { return buf_; }
  size_t size() const { return size_; }
  uint8_t type() const { return type_; }

 private:
  Result fail() {
    abandon();
    // Swallow the rest of the broken stream until its last fragment: mark it as an error
    // the caller counts; following fragments of it start a new (equally broken) message,
    // which the type/size checks catch again.
    return Result::kError;
  }
  uint8_t* buf_;
  size_t size_ = 0;
  uint8_t type_ = 0;
  bool partial_ = false, done_ = false;
};

}  // namespace nicemu::fabric
