// Fuzz target: the fault specification parser (nicemu/fault/fault_spec.h), which reads
// `--fault`, the `fault` config key and `nicemuctl fault set`. A spec that parses must
// survive the round trip through its canonical text and pass the untrusted-config check.
#include <cstdlib>
#include <string>
#include <string_view>

#include "fuzz_driver.h"
#include "nicemu/fault/fault_spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view spec(reinterpret_cast<const char*>(data), size);
  auto cfg = nicemu::fault::default_config();
  std::string err;
  bool seed_given = false;
  if (!nicemu::fault::parse_spec(spec, cfg, err, &seed_given)) {
    if (err.empty()) std::abort();  // a refusal always names the offending token
    return 0;
  }
  std::string text = nicemu::fault::to_spec(cfg);
  auto again = nicemu::fault::default_config();
  if (!nicemu::fault::parse_spec(text, again, err)) std::abort();  // canonical text must parse
  if (nicemu::fault::to_spec(again) != text) std::abort();           // and be a fixed point
  std::string why;
  (void)nicemu::fault::valid_config(cfg, why);
  return 0;
}
