// The program's static data (.data and .bss of the executable): DMAPP's symmetric data
// segment. Found from the executable's writable PT_LOAD segment; every PE runs the same
// executable, so an offset in the segment names the same variable on every PE even when
// ASLR places the segment differently (the library translates by offset).
#pragma once
#include <cstdint>

namespace nicemu::dmapp {

// Page-aligned [base, base+len) of the executable's writable segment; false if none.
bool find_data_segment(uint64_t& base, uint64_t& len);

}  // namespace nicemu::dmapp
