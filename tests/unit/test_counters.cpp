// The counter layout (nicemu/abi/counters_layout.h) and the daemon's counter page
// (nicemu/daemon/stats_page.h): stable, exportable names; entries for CDMs and links;
// totals that only grow, whatever a client writes into its own block.
#include <doctest/doctest.h>

#include <cctype>
#include <cstddef>
#include <cstring>
#include <set>
#include <string>

#include "nicemu/abi/counters_layout.h"
#include "nicemu/abi/cq_entry.h"
#include "nicemu/daemon/stats_page.h"

namespace ac = nicemu::abi::counters;
using nicemu::daemon::StatsPage;

namespace {

// Prometheus metric-name characters, and no clash within one table.
template <size_t N>
void check_names(const ac::CounterInfo (&info)[N]) {
  std::set<std::string> seen;
  for (const auto& c : info) {
    std::string n = c.name;
    CHECK(!n.empty());
    CHECK(std::islower(static_cast<unsigned char>(n[0])));
    for (char ch : n) CHECK((std::islower(static_cast<unsigned char>(ch)) || std::isdigit(static_cast<unsigned char>(ch)) || ch == '_'));
    CHECK(n.find("__") == std::string::npos);
    CHECK(seen.insert(n).second);
    CHECK(std::string(c.help).size() > 5);
  }
}

void init_block(ac::CdmCounterBlock& b) {
  b.magic = ac::kBlockMagic;
  b.version = ac::kVersion;
  b.slots = ac::kCdmSlots;
}

}  // namespace

TEST_CASE("counter names are stable identifiers") {
  check_names(ac::kNodeInfo);
  check_names(ac::kCdmInfo);
  check_names(ac::kLinkInfo);
  // Names that monitoring already keys on (append-only: these must never move).
  CHECK(std::string(ac::kNodeInfo[ac::node::connections].name) == "connections");
  CHECK(std::string(ac::kCdmInfo[ac::cdm::fma_put_posts].name) == "fma_put_posts");
  CHECK(ac::cdm::fma_put_posts == 0);
  CHECK(ac::node::attaches == 1);
}

TEST_CASE("error classes follow the CQE status codes") {
  namespace cqe = nicemu::abi::cqe;
  CHECK(ac::kErrorBase + cqe::kErrProtection - 1 == ac::cdm::errors_protection);
  CHECK(ac::kErrorBase + cqe::kErrBounds - 1 == ac::cdm::errors_bounds);
  CHECK(ac::kErrorBase + cqe::kErrPeerGone - 1 == ac::cdm::errors_peer_gone);
  CHECK(ac::kErrorBase + cqe::kErrTransient - 1 == ac::cdm::errors_transient);
  CHECK(ac::kErrorBase + cqe::kErrInjected - 1 == ac::cdm::errors_injected);
  CHECK(cqe::kErrStatusLast - 1 == ac::kErrorClasses);
}

TEST_CASE("the page: header, node counters, CDM entries, totals, links") {
  StatsPage page("", 42);
  const ac::PageHeader& h = page.header();
  CHECK(h.magic == ac::kMagic);
  CHECK(h.version == ac::kVersion);
  CHECK(h.nic_addr == 42);
  CHECK(h.page_size == ac::kPageSize);
  CHECK(h.state.load() == ac::kPageLive);

  auto c = page.node(ac::node::attaches);
  ++c;
  c++;
  CHECK(page.node(ac::node::attaches).value() == 2);

  ac::CdmCounterBlock b{};
  init_block(b);
  page.cdm_attached(7, 1234, 1000, 3, 5, 0xabc);
  CHECK(page.node(ac::node::cdms_attached).value() == 1);
  // The client's block says `sends`; the page's total after its refresh.
  auto total_after = [&](uint64_t sends) {
    b.v[ac::cdm::smsg_sends] = sends;
    page.refresh(7, &b);
    return page.total(ac::cdm::smsg_sends);
  };
  CHECK(total_after(10) == 10);
  CHECK(total_after(15) == 15);

  // The client's block is untrusted: a counter going down does not take the totals down,
  // and growth after that counts from the new value.
  CHECK(total_after(3) == 15);
  CHECK(total_after(5) == 17);
  // A block whose magic was overwritten is not copied at all.
  b.magic = 0;
  b.v[ac::cdm::smsg_sends] = 1000;
  page.refresh(7, &b);
  CHECK(page.total(ac::cdm::smsg_sends) == 17);
  b.magic = ac::kBlockMagic;

  // Detach takes a last copy, then frees the entry.
  b.v[ac::cdm::smsg_sends] = 6;
  page.cdm_detached(7, &b);
  CHECK(page.total(ac::cdm::smsg_sends) == 18);
  CHECK(page.node(ac::node::cdms_attached).value() == 0);
  page.refresh(7, &b);  // unknown attach id: ignored
  CHECK(page.total(ac::cdm::smsg_sends) == 18);

  page.link(3, ac::link::messages_sent).add(2);
  page.link(3, ac::link::messages_sent).add(1);
  CHECK(page.link(3, ac::link::messages_sent).value() == 3);
  CHECK(page.link(4, ac::link::messages_sent).value() == 0);
}

TEST_CASE("more CDMs than entries: the rest are untracked but still in the totals") {
  StatsPage page("", 1);
  ac::CdmCounterBlock b{};
  init_block(b);
  b.v[ac::cdm::amo_posts] = 1;
  for (uint64_t id = 1; id <= ac::kCdmEntries + 2; ++id) {
    page.cdm_attached(id, 100, 0, uint32_t(id), 1, 1);
    page.refresh(id, &b);
  }
  CHECK(page.node(ac::node::cdms_untracked).value() == 2);
  CHECK(page.node(ac::node::cdms_attached).value() == ac::kCdmEntries + 2);
  CHECK(page.total(ac::cdm::amo_posts) == ac::kCdmEntries + 2);
  page.cdm_detached(ac::kCdmEntries + 1, &b);
  CHECK(page.node(ac::node::cdms_untracked).value() == 1);
  // A tracked one leaves: its entry is free for the next attach.
  page.cdm_detached(1, &b);
  page.cdm_attached(9999, 100, 0, 1, 1, 1);
  CHECK(page.node(ac::node::cdms_untracked).value() == 1);
}

// ---- nicemuctl's reader (tools/nicemuctl/counter_pages.h) ----------------------------------

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <iterator>

#include "counter_pages.h"
#include "daemon_link.h"

namespace {

std::string temp_dir() {
  char tmpl[] = "/tmp/nicemu-pages-XXXXXX";
  REQUIRE(mkdtemp(tmpl) != nullptr);
  return tmpl;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void spit(const std::string& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

}  // namespace

TEST_CASE("reader: a live page reads back what the daemon wrote") {
  std::string dir = temp_dir();
  std::string path = dir + "/nic-5.stats";
  {
    StatsPage page(path, 5);
    struct stat st;
    REQUIRE(stat(path.c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0644);
    page.node(ac::node::registrations).add(3);
    ac::CdmCounterBlock b{};
    init_block(b);
    b.v[ac::cdm::rdma_bytes] = 4096;
    page.cdm_attached(11, getpid(), 1000, 2, 9, 0x55);
    page.refresh(11, &b);
    page.link(6, ac::link::send_failures).add(1);

    auto s = nicemu::tools::read_counter_page(path);
    CHECK(s.nic_addr == 5);
    CHECK(s.running);
    CHECK(s.node[ac::node::registrations] == 3);
    CHECK(s.totals[ac::cdm::rdma_bytes] == 4096);
    REQUIRE(s.cdms.size() == 1);
    CHECK(s.cdms[0].attach_id == 11);
    CHECK(s.cdms[0].inst_id == 2);
    CHECK(s.cdms[0].v[ac::cdm::rdma_bytes] == 4096);
    REQUIRE(s.links.size() == 1);
    CHECK(s.links[0].peer_addr == 6);
    CHECK(s.links[0].v[ac::link::send_failures] == 1);
  }
  // The daemon removes its page when it stops.
  CHECK(access(path.c_str(), F_OK) != 0);
  rmdir(dir.c_str());
}

TEST_CASE("reader: damaged or foreign pages are refused with the reason, never read out of bounds") {
  std::string dir = temp_dir();
  std::string good;
  {
    StatsPage page(dir + "/nic-1.stats", 1);
    good = slurp(dir + "/nic-1.stats");
  }
  std::string bad = dir + "/bad.stats";
  auto refused = [&](const std::string& bytes, const char* why) {
    spit(bad, bytes);
    CHECK_THROWS_WITH_AS(nicemu::tools::read_counter_page(bad), doctest::Contains(why), nicemu::tools::CtlError);
  };
  refused("", "too small");
  refused(good.substr(0, 64), "too small");
  std::string b = good;
  b[0] ^= 1;
  refused(b, "magic");
  b = good;
  b[4] = 99;  // version
  refused(b, "layout version");
  refused(good.substr(0, good.size() - 4096), "file size");
  b = good;
  uint64_t far = uint64_t{1} << 40;
  std::memcpy(&b[offsetof(ac::PageHeader, cdm_table_offset)], &far, 8);
  refused(b, "tables outside");
  b = good;
  uint32_t many = 0xFFFFFFFF;
  std::memcpy(&b[offsetof(ac::PageHeader, link_entries)], &many, 4);
  refused(b, "tables outside");
  CHECK_THROWS_AS(nicemu::tools::read_counter_page(dir + "/missing.stats"), nicemu::tools::CtlError);

  // A page whose daemon is gone (state live, pid of no process) reads as not running.
  b = good;
  uint32_t nopid = 0x7FFFFFF0;
  std::memcpy(&b[offsetof(ac::PageHeader, daemon_pid)], &nopid, 4);
  spit(bad, b);
  CHECK_FALSE(nicemu::tools::read_counter_page(bad).running);
  unlink(bad.c_str());
  rmdir(dir.c_str());
}
