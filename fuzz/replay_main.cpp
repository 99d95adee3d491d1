// Replays files (or every file of directories) through a fuzz target's entry function, so
// the corpus and every crash found by fuzzing are re-checked by the ordinary (gcc) build.
// Fails if a path cannot be read or no file was replayed; a regression crashes or trips
// the sanitizers of the build.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "fuzz_driver.h"

namespace fs = std::filesystem;

static bool replay(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "replay: cannot read %s\n", p.c_str());
    return false;
  }
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  return true;
}

int main(int argc, char** argv) {
  size_t n = 0;
  for (int i = 1; i < argc; ++i) {
    fs::path p(argv[i]);
    std::error_code ec;
    if (fs::is_directory(p, ec)) {
      std::vector<fs::path> files;
      for (const auto& e : fs::directory_iterator(p))
        if (e.is_regular_file()) files.push_back(e.path());
      std::sort(files.begin(), files.end());
      for (const auto& f : files) {
        if (!replay(f)) return 1;
        ++n;
      }
    } else if (fs::exists(p, ec)) {
      if (!replay(p)) return 1;
      ++n;
    }
    // A missing directory (no regressions yet for this target) replays nothing.
  }
  std::printf("replayed %zu inputs\n", n);
  return n > 0 ? 0 : 1;
}
