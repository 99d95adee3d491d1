// Fuzz target: the daemon's config file reader (Settings::read_config, nicemu/daemon/
// settings.h): TOML, every key checked against the parameter table and every value
// validated. The reader takes a path, so each input is written to a memfd and read
// through /proc/self/fd. Refusals are SettingsError; anything else escaping is a bug.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "fuzz_driver.h"
#include "nicemu/daemon/settings.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const int fd = memfd_create("nicemu-fuzz-config", 0);
  static const std::string path = "/proc/self/fd/" + std::to_string(fd);
  if (fd < 0 || ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != static_cast<ssize_t>(size)) std::abort();
  try {
    auto values = nicemu::daemon::Settings::read_config(path);
    for (const auto& [key, text] : values)
      if (key.empty()) std::abort();
  } catch (const nicemu::daemon::SettingsError&) {
    // A refused file: the expected outcome of most inputs.
  }
  return 0;
}
