// The entry point every fuzz target defines (libFuzzer's). Built with libFuzzer
// (-Dfuzz=true, clang) it is driven by the fuzzer; in a normal build replay_main.cpp calls
// it once per file of the committed corpus and regressions (meson test suite `fuzz`).
#pragma once
#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
