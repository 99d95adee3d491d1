// Fuzz target: the node's fault page (abi/fault_layout.h) overwritten by a client. The page
// is a file of mode 0644 owned by the daemon's user: when the daemon runs as the jobs' own
// user (single-user setups, the test suites), a client can open it read-write and write
// anything into it. What the daemon does with the page afterwards must not depend on those
// bytes: `nicemuctl fault get/set` (to_spec, parse_spec on top of the current
// configuration) and the fabric's packet injector (Injector::configure, decide) use the
// daemon's own copy of what it published. The libraries' reader (read_config, then the
// Injector) is run on the scribbled page too: it must stay within its arrays.
//
// Input: the bytes of the page's header and configuration, as a client writes them (the
// rest of the page is left as published).
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

#include "fuzz_driver.h"
#include "nicemu/fault/fault_injector.h"
#include "nicemu/fault/fault_page.h"
#include "nicemu/fault/fault_spec.h"

namespace af = nicemu::abi::fault;
namespace nf = nicemu::fault;

namespace {
char g_dir[] = "/tmp/nicemu-fuzz-fault-XXXXXX";

struct Rig {
  std::string path;
  nf::PagePublisher* pub = nullptr;
  af::Page* client = nullptr;  // the client's read-write mapping of the same file
  af::Config published{};
  Rig() {
    if (!mkdtemp(g_dir)) std::abort();
    std::atexit([] { std::filesystem::remove_all(g_dir); });
    path = std::string(g_dir) + "/nic-0.fault";
    pub = new nf::PagePublisher(path);
    std::string err;
    published = nf::default_config();
    if (!nf::parse_spec("on seed=7 put.drop=0.01 nth=smsg:5:dup link_down=3@100..200ms", published, err)) std::abort();
    pub->publish(published);
    int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    void* p = fd < 0 ? MAP_FAILED : mmap(nullptr, af::kPageBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) std::abort();
    ::close(fd);
    client = static_cast<af::Page*>(p);
  }
};
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Rig rig;
  // The client's scribble, over whatever is there.
  std::memcpy(reinterpret_cast<char*>(rig.client), data, size < sizeof(af::Page) ? size : sizeof(af::Page));

  // The daemon's reads: its answer to `nicemuctl fault get`, a `fault set` on top of the
  // current configuration, the fabric's injector.
  if (std::memcmp(&rig.pub->config(), &rig.published, sizeof rig.published) != 0) {
    std::fprintf(stderr, "the daemon's fault configuration follows the client's writes\n");
    std::abort();
  }
  std::string text = nf::to_spec(rig.pub->config());
  af::Config c = rig.pub->config();
  std::string err;
  if (!nf::parse_spec("get.drop=0.5 amo.error=0.25@3", c, err)) std::abort();
  nf::Injector inj(rig.pub->config(), 1, rig.pub->epoch_ns());
  for (uint32_t k = 0; k < af::kKinds; ++k) (void)inj.decide(static_cast<af::Kind>(k), 3, nf::monotonic_ns());

  // A library reading the scribbled page.
  af::Config lc;
  uint64_t epoch = 0;
  uint32_t seq = 0;
  if (nf::read_config(rig.client, lc, epoch, seq)) {
    nf::Injector li(lc, 2, epoch);
    for (uint32_t k = 0; k < af::kKinds + 2; ++k) (void)li.decide(static_cast<af::Kind>(k), 3, epoch + 150000000);
    (void)li.reorder_hold_us();
    (void)nf::to_spec(lc);
  }
  return 0;
}
