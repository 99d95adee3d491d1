// Fault injector: decisions are a pure function of seed, stream and order (replayable),
// rates follow the configured probabilities, nth hooks and link windows fire exactly, and
// the text form of a configuration round-trips.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "nicemu/fault/fault_injector.h"
#include "nicemu/fault/fault_page.h"
#include "nicemu/fault/fault_spec.h"

namespace af = nicemu::abi::fault;
using nicemu::fault::Decision;
using nicemu::fault::Injector;

namespace {
af::Config spec(const char* s) {
  af::Config c = nicemu::fault::default_config();
  std::string err;
  REQUIRE_MESSAGE(nicemu::fault::parse_spec(s, c, err), err);
  return c;
}
std::vector<int> run(const af::Config& c, uint64_t stream, int n, af::Kind k = af::kSmsg) {
  Injector inj(c, stream, 0);
  std::vector<int> out;
  for (int i = 0; i < n; ++i) {
    Decision d = inj.decide(k, 1, 0);
    out.push_back(d.action * 100000 + static_cast<int>(d.delay_us % 100000));
  }
  return out;
}
}  // namespace

TEST_CASE("fault: the same seed gives the same decisions, another seed others") {
  af::Config c = spec("seed=42 smsg.drop=0.1 smsg.dup=0.05 smsg.delay=0.2 delay_us=10..500");
  auto a = run(c, 7, 5000), b = run(c, 7, 5000);
  CHECK(a == b);
  af::Config c2 = c;
  c2.seed = 43;
  CHECK(run(c2, 7, 5000) != a);
  CHECK(run(c, 8, 5000) != a);  // streams are independent
}

TEST_CASE("fault: rates follow the probabilities") {
  af::Config c = spec("seed=1 smsg.drop=0.1 smsg.dup=0.05");
  Injector inj(c, 1, 0);
  int drop = 0, dup = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    Decision d = inj.decide(af::kSmsg, 3, 0);
    drop += d.action == af::kDrop;
    dup += d.action == af::kDup;
  }
  // The first rule that fires decides: dup is drawn only when drop did not fire.
  CHECK(drop == doctest::Approx(0.1 * n).epsilon(0.03));
  CHECK(dup == doctest::Approx(0.9 * 0.05 * n).epsilon(0.05));
  // A rule for another kind or another peer never fires.
  Injector other(spec("seed=1 put.error=1@5"), 1, 0);
  for (int i = 0; i < 100; ++i) {
    CHECK(other.decide(af::kSmsg, 5, 0).action == af::kNone);
    CHECK(other.decide(af::kFmaPut, 4, 0).action == af::kNone);
  }
  CHECK(other.decide(af::kFmaPut, 5, 0).action == af::kError);
}

TEST_CASE("fault: nth hook fails exactly the Nth operation of its kind") {
  Injector inj(spec("nth=amo:3:error nth=rdma:2:error"), 9, 0);
  std::vector<int> amo_err, rdma_err;
  for (int i = 1; i <= 6; ++i) {
    if (inj.decide(af::kAmo, 0, 0).action == af::kError) amo_err.push_back(i);
    if (inj.decide(af::kFmaGet, 0, 0).action != af::kNone) FAIL("get was not selected");
    if (inj.decide(i % 2 ? af::kRdmaPut : af::kRdmaGet, 0, 0).action == af::kError) rdma_err.push_back(i);
  }
  CHECK(amo_err == std::vector<int>{3});
  CHECK(rdma_err == std::vector<int>{2});
}

TEST_CASE("fault: link windows count from the epoch") {
  const uint64_t ms = 1000000, epoch = 1000 * ms;
  Injector inj(spec("link_down=4@100..300ms"), 1, epoch);
  uint64_t up = 0;
  CHECK_FALSE(inj.link_down(4, epoch + 99 * ms));
  CHECK(inj.link_down(4, epoch + 100 * ms, &up));
  CHECK(up == epoch + 300 * ms);
  CHECK_FALSE(inj.link_down(5, epoch + 150 * ms));
  CHECK_FALSE(inj.link_down(4, epoch + 300 * ms));
  Decision d = inj.decide(af::kSmsg, 4, epoch + 200 * ms);
  CHECK(d.action == af::kLinkDown);
  CHECK(d.delay_us == 100001);
}

TEST_CASE("fault: error effect and reorder holds are drawn per decision and replay") {
  af::Config c = spec("seed=5 amo.error=1 error_done=0.5 reorder=0.3 delay_us=50..60");
  Injector a(c, 2, 0), b(c, 2, 0);
  int done = 0, held = 0;
  for (int i = 0; i < 10000; ++i) {
    Decision x = a.decide(af::kAmo, 0, 0), y = b.decide(af::kAmo, 0, 0);
    REQUIRE(x.action == af::kError);
    CHECK(x.effect_done == y.effect_done);
    uint32_t h = a.reorder_hold_us();
    CHECK(h == b.reorder_hold_us());
    if (h) CHECK((h >= 50 && h <= 60));
    done += x.effect_done;
    held += h != 0;
  }
  CHECK(done == doctest::Approx(5000).epsilon(0.05));
  CHECK(held == doctest::Approx(3000).epsilon(0.07));
}

TEST_CASE("fault: disabled injects nothing") {
  af::Config c = spec("seed=5 any.drop=1");
  c.enabled = 0;
  Injector inj(c, 1, 0);
  for (int i = 0; i < 100; ++i) CHECK(inj.decide(af::kSmsg, 0, 0).action == af::kNone);
  CHECK(inj.reorder_hold_us() == 0);
}

TEST_CASE("fault spec: round trip and errors") {
  af::Config c = spec(
      "seed=77 ordering=relaxed reorder=0.25 window=8 delay_us=5..9 retransmit_us=300 error_done=0.1 max_retrans=3 "
      "smsg.drop=0.1 smsg.dup=5% put.error=0.2@3 rdma.error=0.01 nth=amo:4:error link_down=*@10..20ms");
  std::string text = nicemu::fault::to_spec(c);
  af::Config d = nicemu::fault::default_config();
  std::string err;
  REQUIRE_MESSAGE(nicemu::fault::parse_spec(text, d, err), err);
  CHECK(std::memcmp(&c, &d, sizeof c) == 0);
  CHECK(nicemu::fault::to_spec(d) == text);
  // A disabled configuration's text parses back disabled, rules kept: an explicit off
  // decides over the enabling by rules (found by fuzzing, fuzz/regressions/fault_spec).
  af::Config off = c;
  off.enabled = 0;
  af::Config e = nicemu::fault::default_config();
  REQUIRE_MESSAGE(nicemu::fault::parse_spec(nicemu::fault::to_spec(off), e, err), err);
  CHECK(e.enabled == 0);
  CHECK(e.rule_count == c.rule_count);
  CHECK(std::memcmp(&off, &e, sizeof off) == 0);
  // A live change of one knob replaces the rule instead of adding one.
  REQUIRE(nicemu::fault::parse_spec("smsg.drop=0.3", d, err));
  CHECK(d.rule_count == c.rule_count);
  for (const char* badspec : {"smsg.drop=2", "smsg.fly=0.1", "bogus", "window=0", "nth=amo:0:error",
                              "link_down=3@20..10ms", "delay_us=9..5", "seed=x", "put.error=0.1@*x"}) {
    af::Config e = nicemu::fault::default_config();
    CHECK_MESSAGE(!nicemu::fault::parse_spec(badspec, e, err), badspec);
  }
  af::Config v = nicemu::fault::default_config();
  v.rule_count = 99;
  CHECK_FALSE(nicemu::fault::valid_config(v, err));
}

TEST_CASE("fault spec: what is beyond the hardware or has no effect is named") {
  // Hardware-like settings (docs/fault-injection.md, "What the hardware can produce").
  CHECK(nicemu::fault::hardware_notes(spec("seed=1 smsg.drop=0.1 smsg.exhaust=0.01 put.error=0.1 amo.error=0.1 "
                                           "rdma.error=0.1 any.delay=0.2 reorder=0.5 ordering=auto "
                                           "packet.drop=0.1 link_down=*@0..10ms nth=amo:3:error"))
            .empty());
  CHECK(nicemu::fault::hardware_notes(spec("ordering=strict reorder=1")).empty());
  // Forcing default or relaxed order reorders what IN_ORDER / STRICT_PI keep in order.
  for (const char* o : {"ordering=relaxed", "ordering=default"}) {
    auto notes = nicemu::fault::hardware_notes(spec(o));
    REQUIRE_MESSAGE(notes.size() == 1, o);
    CHECK(notes[0].find("stress, beyond the hardware") != std::string::npos);
    CHECK(notes[0].find(o) != std::string::npos);
  }
  // Rules no path consults.
  auto notes = nicemu::fault::hardware_notes(spec("datagram.dup=0.5 packet.error=0.1 nth=packet:2:exhaust"));
  REQUIRE(notes.size() == 3);
  CHECK(notes[0].find("no effect: datagram.dup") == 0);
  // Datagrams act on error, corrupt, drop and exhaust (GNI_POST_ERROR, GNI_POST_TIMEOUT).
  CHECK(nicemu::fault::hardware_notes(spec("datagram.drop=0.5 datagram.error=0.1")).empty());
  CHECK(notes[1].find("no effect: packet.error") == 0);
  CHECK(notes[2].find("no effect: nth=packet:2:exhaust") == 0);
}

TEST_CASE("fault: registrations fail only where a rule names them") {
  // `any` leaves registrations alone, and so keeps the decision streams of older specs.
  af::Config any = spec("seed=5 any.error=1");
  CHECK_FALSE(Injector(any, 1, 0).selects(af::kReg));
  CHECK_FALSE(Injector(any, 1, 0).selects(af::kDatagram));  // datagrams too: only where named
  CHECK(Injector(spec("seed=5 datagram.drop=1"), 1, 0).selects(af::kDatagram));
  CHECK(Injector(any, 1, 0).selects(af::kAmo));
  af::Config reg = spec("seed=5 reg.error=50% nth=reg:3:exhaust");
  Injector inj(reg, 1, 0);
  CHECK(inj.selects(af::kReg));
  CHECK_FALSE(inj.selects(af::kSmsg));
  int errors = 0, exhausted = 0;
  for (int i = 1; i <= 1000; ++i) {
    Decision d = inj.decide(af::kReg, 1, 0);
    if (i == 3) CHECK(d.action == af::kExhaust);
    errors += d.action == af::kError;
    exhausted += d.action == af::kExhaust;
  }
  CHECK(exhausted == 1);
  CHECK(errors > 400);
  CHECK(errors < 600);
  CHECK(nicemu::fault::to_spec(reg).find("reg.error") != std::string::npos);
  // Actions a registration cannot take are named.
  auto notes = nicemu::fault::hardware_notes(spec("reg.drop=0.5 reg.exhaust=0.1"));
  REQUIRE(notes.size() == 1);
  CHECK(notes[0].find("no effect on registrations: reg.drop") == 0);
}

TEST_CASE("fault page: published configuration is read back consistently") {
  nicemu::fault::PagePublisher pub("");
  af::Config c = spec("seed=9 smsg.drop=0.5");
  pub.publish(c);
  // The publisher's private page stands for the mapped file.
  const af::Page* page = pub.page();
  CHECK(page->active.load() == 1);
  af::Config out{};
  uint64_t epoch = 0;
  uint32_t seq = 0;
  REQUIRE(nicemu::fault::read_config(page, out, epoch, seq));
  CHECK(std::memcmp(&out, &c, sizeof c) == 0);
  CHECK(epoch == pub.epoch_ns());
  CHECK(seq % 2 == 0);
  CHECK(nicemu::fault::map_page("/nonexistent/nic-1.fault")->active.load() == 0);
  // A client of the daemon's uid can write the page file: what the daemon uses is its own
  // copy (fuzz/regressions/fault_page).
  auto* w = const_cast<af::Page*>(page);
  w->cfg.rule_count = 0xFFFFFFFF;
  w->cfg.enabled = 0;
  CHECK(pub.config().rule_count == c.rule_count);
  CHECK(std::memcmp(&pub.config(), &c, sizeof c) == 0);
  af::Config more = pub.config();
  std::string err;
  CHECK(nicemu::fault::parse_spec("get.drop=0.1", more, err));
  CHECK(more.rule_count == c.rule_count + 1);
}

TEST_CASE("fault page: a file page is mapped read-only by readers and follows live changes") {
  char dir[] = "/tmp/nicemu-fault-page-XXXXXX";
  REQUIRE(mkdtemp(dir) != nullptr);
  const std::string sock = std::string(dir) + "/nic-3.sock";
  const std::string path = nicemu::fault::page_path(sock);
  CHECK(path == std::string(dir) + "/nic-3.fault");
  {
    nicemu::fault::PagePublisher pub(path);
    const af::Page* page = nicemu::fault::map_page(path);
    CHECK(page->magic == af::kMagic);
    CHECK(page->active.load() == 0);  // created all off
    pub.publish(spec("seed=12 put.error=0.25"));
    af::Config out{};
    uint64_t epoch = 0;
    uint32_t seq = 0;
    REQUIRE(nicemu::fault::read_config(page, out, epoch, seq));
    CHECK(page->active.load() == 1);
    CHECK(out.seed == 12);
    CHECK(out.rule_count == 1);
    af::Config off = out;
    off.enabled = 0;
    pub.publish(off);
    uint32_t seq2 = 0;
    REQUIRE(nicemu::fault::read_config(page, out, epoch, seq2));
    CHECK(seq2 != seq);
    CHECK(page->active.load() == 0);
  }
  // The publisher removes its file; readers of a node without one get the all-off page.
  CHECK(nicemu::fault::map_page(path)->active.load() == 0);
  rmdir(dir);
}
