// The entry point every fuzz target defines (libFuzzer's). Built with libFuzzer
// (-Dfuzz=true, clang) it is driven by the fuzzer; in a normal build replay_main.cpp calls
// it once per file of the committed corpus and regressions (meson test suite `fuzz`).
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace fuzz {

// Takes fixed-size values off the front of the input; zeros once it runs out.
struct Reader {
  const uint8_t* p;
  size_t n;
  template <typename T>
  T take() {
    T v{};
    size_t k = n < sizeof v ? n : sizeof v;
    std::memcpy(&v, p, k);
    p += k;
    n -= k;
    return v;
  }
  // Up to `max` bytes into `dst`; how many.
  size_t bytes(void* dst, size_t max) {
    size_t k = n < max ? n : max;
    std::memcpy(dst, p, k);
    p += k;
    n -= k;
    return k;
  }
  bool empty() const { return n == 0; }
};

}  // namespace fuzz
