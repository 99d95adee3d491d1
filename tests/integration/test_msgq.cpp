// Integration tests of GNI_Msgq* against real daemons and processes: instances on two
// emulated nodes exchanging messages both ways (order, exactly once, tag/id/snd_pe, local
// completion events), flow control, blocking progress, size and connection errors,
// attribute mismatches, dead receivers and senders, NIC down, forged ring entries, and
// GNI_MsgqProgress's answers as Cray's header defines them (SUCCESS: all messages were
// processed, none included; NOT_DONE: messages could still be available).
#include <doctest/doctest.h>

#include <sys/mman.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <thread>
#include <vector>

#include "harness.h"
#include "nicemu/abi/msgq_ring.h"
#include "nicemu/abi/region_map.h"

using namespace harness;
namespace mq = nicemu::abi::msgq;

namespace {

// State shared by the test's processes (mapped before fork): barriers, and the connection
// attributes that applications exchange out of band (PMI).
struct Shared {
  std::atomic<uint32_t> arrived[32];
  std::atomic<uint32_t> flag[8];
  gni_msgq_ep_attr_t attrs[2];  // node n's attributes for the other node
  uint32_t attrs_size[2];
};

Shared* make_shared_state() {
  void* p = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  REQUIRE(p != MAP_FAILED);
  return new (p) Shared{};
}

// Child side: every one of `n` processes arrives at barrier `phase` and waits for the rest.
void barrier(Shared* s, int phase, uint32_t n) {
  s->arrived[phase].fetch_add(1);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (s->arrived[phase].load() < n) {
    CHILD_CHECK(std::chrono::steady_clock::now() < deadline);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

gni_msgq_attr_t make_attrs(uint32_t q_sz, uint32_t nloc, uint8_t modes = GNI_MSGQ_MODE_BLOCKING) {
  gni_msgq_attr_t a{};
  a.max_msg_sz = 64;
  a.smsg_q_sz = q_sz;
  a.rcv_pool_sz = 1;
  a.num_msgq_eps = 2;
  a.nloc_insts = nloc;
  a.modes = modes;
  a.rcv_cq_sz = 16;
  return a;
}

// What every message carries in its header (the callback gets no length: messages say it).
struct Hdr {
  uint32_t src_inst;
  uint32_t seq;
  uint32_t msg_len;
  uint32_t reserved;
};

uint8_t tag_of(uint32_t src, uint32_t seq) { return uint8_t(seq * 7 + src); }
char byte_of(uint32_t src, uint32_t seq, uint32_t i) { return char(src * 31 + seq + i); }

// Receiver state behind cb_data: checks order, content, tag and snd_pe of every message.
struct Receiver {
  uint32_t expect_pe = 0;
  std::map<uint32_t, uint32_t> next;  // sender inst -> next seq
  uint32_t got = 0, bad = 0;
  int ret = 1;                        // what the callback returns
};

int on_message(uint32_t snd_id, uint32_t snd_pe, void* msg, uint8_t tag, void* cb_data) {
  auto* r = static_cast<Receiver*>(cb_data);
  Hdr h;
  std::memcpy(&h, msg, sizeof h);
  bool ok = snd_pe == r->expect_pe && h.src_inst == snd_id && h.seq == r->next[snd_id] &&
            tag == tag_of(snd_id, h.seq) && h.msg_len + sizeof(Hdr) <= 64;
  const char* body = static_cast<const char*>(msg) + sizeof(Hdr);
  for (uint32_t i = 0; ok && i < h.msg_len; ++i) ok = body[i] == byte_of(snd_id, h.seq, i);
  if (!ok) {
    std::fprintf(stderr, "bad message: snd_id %u snd_pe %u seq %u (expected %u) tag %u\n", snd_id, snd_pe, h.seq,
                 r->next[snd_id], tag);
    ++r->bad;
  }
  ++r->next[snd_id];
  ++r->got;
  return r->ret;
}

// A MSGQ client: CDM, send CQ, queue, and one bound EP per destination.
struct Client {
  Gni g;
  gni_cq_handle_t scq = nullptr;
  gni_msgq_handle_t q = nullptr;
  Receiver rx;
  std::map<std::pair<uint32_t, uint32_t>, gni_ep_handle_t> eps;
  uint32_t next_event_id = 0;  // msg_id of the next expected local completion

  gni_return_t init(uint32_t inst, Cred c, gni_msgq_attr_t a, uint32_t other_pe) {
    CHILD_CHECK(g.open(inst, c) == GNI_RC_SUCCESS);
    CHILD_CHECK(GNI_CqCreate(g.nic, 4096, 0, GNI_CQ_NOBLOCK, nullptr, nullptr, &scq) == GNI_RC_SUCCESS);
    rx.expect_pe = other_pe;
    return GNI_MsgqInit(g.nic, on_message, &rx, scq, &a, &q);
  }
  gni_ep_handle_t ep(uint32_t pe, uint32_t inst) {
    auto& e = eps[{pe, inst}];
    if (!e) {
      e = bound_ep(g.nic, g.cq, pe, inst);
    }
    return e;
  }
  gni_return_t send(uint32_t pe, uint32_t inst, uint32_t seq, uint32_t msg_len, uint32_t msg_id) {
    Hdr h{g.inst, seq, msg_len, 0};
    char body[64];
    for (uint32_t i = 0; i < msg_len && i < sizeof body; ++i) body[i] = byte_of(g.inst, seq, i);
    return GNI_MsgqSend(q, ep(pe, inst), &h, sizeof h, body, msg_len, msg_id, tag_of(g.inst, seq));
  }
  // Local completions come in send order, each a MSGQ event with the msg_id.
  void drain_send_events() {
    gni_cq_entry_t e;
    while (GNI_CqGetEvent(scq, &e) == GNI_RC_SUCCESS) {
      CHILD_CHECK(GNI_CQ_GET_TYPE(e) == GNI_CQ_EVENT_TYPE_MSGQ);
      CHILD_CHECK(GNI_CQ_GET_MSG_ID(e) == next_event_id);
      ++next_event_id;
    }
  }
  // Waits until `n` local completions came: a send to another host completes when the
  // target's daemon answered (or fails the child after 30 s).
  void wait_send_events(uint32_t n) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    for (drain_send_events(); next_event_id < n; drain_send_events()) {
      CHILD_CHECK(std::chrono::steady_clock::now() < deadline);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  // Progresses until `n` messages arrived in total (or fails the child after 30 s).
  void receive_until(uint32_t n) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (rx.got < n) {
      CHILD_CHECK(std::chrono::steady_clock::now() < deadline);
      gni_return_t rc = GNI_MsgqProgress(q, 100);
      CHILD_CHECK(rc == GNI_RC_SUCCESS || rc == GNI_RC_NOT_DONE);
    }
  }
};

// Node leaders exchange attributes and connect both ways.
void connect_nodes(Shared* s, Client& c, int node, uint32_t other_pe, uint32_t nprocs, int phase) {
  CHILD_CHECK(GNI_MsgqGetConnAttrs(c.q, other_pe, &s->attrs[node], &s->attrs_size[node]) == GNI_RC_SUCCESS);
  barrier(s, phase, nprocs);
  gni_msgq_ep_attr_t peer{};
  std::memcpy(&peer, &s->attrs[1 - node], s->attrs_size[1 - node]);  // only what was "sent"
  CHILD_CHECK(GNI_MsgqConnect(c.q, other_pe, &peer) == GNI_RC_SUCCESS);
}

}  // namespace

TEST_CASE_FIXTURE(TwoNodes, "two nodes, two instances each: every message once, in order, both ways") {
  Shared* s = make_shared_state();
  constexpr uint32_t kN = 400;
  const gni_msgq_attr_t attrs = make_attrs(8, 2);
  auto proc = [&](int node, uint32_t inst) {
    return [&, node, inst] {
      const uint32_t my_pe = cl.addr(node), other_pe = cl.addr(1 - node);
      const uint32_t other_base = node == 0 ? 3 : 1;  // node 0 runs insts 1, 2; node 1 runs 3, 4
      Client cli;
      CHILD_CHECK(cli.init(inst, c, attrs, other_pe) == GNI_RC_SUCCESS);
      barrier(s, 0, 4);
      if (inst == 1 || inst == 3) {
        connect_nodes(s, cli, node, other_pe, 4, 1);
        // Both instances of the node are listed, each naming our ring for the other node.
        CHILD_CHECK(s->attrs[node].num_insts == 2 && s->attrs[node].pe_addr == my_pe);
        CHILD_CHECK(s->attrs_size[node] == offsetof(gni_msgq_ep_attr_t, insts) + 2 * sizeof(gni_msgq_rem_inst_t));
      } else {
        barrier(s, 1, 4);
      }
      barrier(s, 2, 4);
      uint32_t not_done = 0, id = 0;
      for (uint32_t seq = 0; seq < kN; ++seq)
        for (uint32_t d = 0; d < 2; ++d) {
          gni_return_t rc;
          // Full ring: deliver what arrived for us meanwhile, then try again.
          while ((rc = cli.send(other_pe, other_base + d, seq, seq % 49, id)) == GNI_RC_NOT_DONE) {
            ++not_done;
            const uint32_t before = cli.rx.got;
            const gni_return_t prc = GNI_MsgqProgress(cli.q, 0);
            CHILD_CHECK(prc == GNI_RC_SUCCESS || prc == GNI_RC_NOT_DONE);
            if (cli.rx.got == before) std::this_thread::yield();  // nothing for us yet
          }
          CHILD_CHECK(rc == GNI_RC_SUCCESS);
          ++id;
          cli.drain_send_events();
        }
      cli.receive_until(2 * kN);
      cli.wait_send_events(2 * kN);
      CHILD_CHECK(cli.next_event_id == 2 * kN);
      CHILD_CHECK(cli.rx.bad == 0);
      CHILD_CHECK(cli.rx.got == 2 * kN);
      CHILD_CHECK(cli.rx.next[other_base] == kN && cli.rx.next[other_base + 1] == kN);
      barrier(s, 3, 4);
      // Everything sent was taken, everything that arrived was delivered: all processed.
      CHILD_CHECK(GNI_MsgqIdle(cli.q) == GNI_RC_SUCCESS);
      CHILD_CHECK(GNI_MsgqProgress(cli.q, 0) == GNI_RC_SUCCESS);
      CHILD_CHECK(cli.rx.got == 2 * kN);
      if (inst == 1) {
        auto st = cl.status(node);
        CHILD_CHECK(st["msgq"].size() == 1);
        gni_msgq_attr_t a = attrs;
        uint32_t size = 0;
        CHILD_CHECK(GNI_MsgqSize(&a, &size) == GNI_RC_SUCCESS);
        CHILD_CHECK(st["msgq"][0]["bytes"] == size);
        CHILD_CHECK(st["msgq"][0]["members"] == 2);
        CHILD_CHECK(st["msgq"][0]["malformed"] == 0);
      }
      std::fprintf(stderr, "inst %u: %u sends found the ring full\n", inst, not_done);
      barrier(s, 4, 4);
      CHILD_CHECK(GNI_MsgqRelease(cli.q) == GNI_RC_SUCCESS);
      return 0;
    };
  };
  std::vector<pid_t> pids = {cl.spawn(0, proc(0, 1)), cl.spawn(0, proc(0, 2)), cl.spawn(1, proc(1, 3)),
                             cl.spawn(1, proc(1, 4))};
  for (pid_t p : pids) CHECK(cl.wait(p, 120) == 0);
  if (across_hosts_ofi()) {
    // With the ranks' data over libfabric the messages went rank to rank, none relayed.
    for (int n = 0; n < 2; ++n) {
      auto st = cl.status(n);
      CHECK(st["msgq_relay"]["forwarded"].get<uint64_t>() == 0);
      CHECK(st["ofi"]["ops"].get<uint64_t>() >= 4 * kN);
      CHECK(st["ofi"]["served"].get<uint64_t>() >= 4 * kN);
      CHECK(st["ofi"]["dropped"].get<uint64_t>() == 0);
    }
  } else if (cl.fabric()) {
    // Across hosts (NICEMU_TEST_FABRIC=1) the daemons carried every message, none lost.
    for (int n = 0; n < 2; ++n) {
      auto r = cl.status(n)["msgq_relay"];
      CHECK(r["forwarded"].get<uint64_t>() == 4 * kN);
      CHECK(r["delivered"].get<uint64_t>() == 4 * kN);
      CHECK(r["undeliverable"].get<uint64_t>() == 0);
    }
  }
  // The last member gone, each daemon reclaimed its segment.
  CHECK(cl.status(0)["msgq"].empty());
  CHECK(cl.status(1)["msgq"].empty());
}

// Same semantics on one host and across hosts (NICEMU_TEST_FABRIC=1: credits, msgq_layout.h
// TxCredit): a node's senders never have more than the ring's depth of messages in flight.
TEST_CASE_FIXTURE(TwoNodes, "two senders, one ring: NOT_DONE at its depth, room again once the receiver took them") {
  Shared* s = make_shared_state();
  constexpr uint32_t kDepth = 16, kN = 500;
  const gni_msgq_attr_t attrs = make_attrs(kDepth, 2);
  auto sender = [&](uint32_t inst) {
    return [&, inst] {
      Client cli;
      CHILD_CHECK(cli.init(inst, c, attrs, cl.addr(1)) == GNI_RC_SUCCESS);
      barrier(s, 0, 3);
      barrier(s, 1, 3);  // the receiver's attributes are out
      if (inst == 1) {
        gni_msgq_ep_attr_t peer{};
        std::memcpy(&peer, &s->attrs[1], s->attrs_size[1]);
        CHILD_CHECK(GNI_MsgqConnect(cli.q, cl.addr(1), &peer) == GNI_RC_SUCCESS);
      }
      barrier(s, 2, 3);
      uint32_t seq = 0;
      if (inst == 1) {  // fills the ring alone
        while (seq < kDepth && cli.send(cl.addr(1), 3, seq, seq % 40, seq) == GNI_RC_SUCCESS) ++seq;
        CHILD_CHECK(seq == kDepth);
      }
      barrier(s, 3, 3);
      // Full for both senders of the node, and it stays so while nobody takes anything.
      for (int i = 0; i < 20; ++i) {
        CHILD_CHECK(cli.send(cl.addr(1), 3, seq, 0, seq) == GNI_RC_NOT_DONE);
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      barrier(s, 4, 3);
      barrier(s, 5, 3);  // the receiver took the first kDepth
      auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      for (; seq < kN; ++seq) {
        gni_return_t rc;
        while ((rc = cli.send(cl.addr(1), 3, seq, seq % 40, seq)) == GNI_RC_NOT_DONE) {
          CHILD_CHECK(std::chrono::steady_clock::now() < deadline);
          std::this_thread::yield();
        }
        CHILD_CHECK(rc == GNI_RC_SUCCESS);
        cli.drain_send_events();
      }
      cli.wait_send_events(kN);
      CHILD_CHECK(cli.next_event_id == kN);
      if (cl.fabric() && !across_hosts_ofi() && inst == 1) {
        // Every slot's credit comes back once the receiver took its message.
        auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (cl.status(0)["msgq_relay"]["credits_received"].get<uint64_t>() < 2 * kN &&
               std::chrono::steady_clock::now() < until)
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
        CHILD_CHECK(cl.status(0)["msgq_relay"]["credits_received"].get<uint64_t>() == 2 * kN);
      }
      barrier(s, 6, 3);
      if (inst == 2) {
        // A destination that never joined: on one host the send says so at once; across
        // hosts the target's daemon refuses it and the local completion carries the error.
        auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        gni_return_t rc;
        while ((rc = cli.send(cl.addr(1), 99, 0, 0, 777)) == GNI_RC_NOT_DONE) {
          CHILD_CHECK(std::chrono::steady_clock::now() < until);
          std::this_thread::yield();
        }
        if (!cl.fabric()) {
          CHILD_CHECK(rc == GNI_RC_INVALID_STATE);
        } else {
          CHILD_CHECK(rc == GNI_RC_SUCCESS);
          gni_cq_entry_t e;
          gni_return_t r;
          while ((r = GNI_CqGetEvent(cli.scq, &e)) == GNI_RC_NOT_DONE) {
            CHILD_CHECK(std::chrono::steady_clock::now() < until);
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
          }
          CHILD_CHECK(r == GNI_RC_TRANSACTION_ERROR);
          CHILD_CHECK(GNI_CQ_GET_TYPE(e) == GNI_CQ_EVENT_TYPE_MSGQ && GNI_CQ_GET_MSG_ID(e) == 777);
        }
      }
      CHILD_CHECK(GNI_MsgqRelease(cli.q) == GNI_RC_SUCCESS);
      return 0;
    };
  };
  pid_t receiver = cl.spawn(1, [&] {
    Client cli;
    CHILD_CHECK(cli.init(3, c, attrs, cl.addr(0)) == GNI_RC_SUCCESS);
    barrier(s, 0, 3);
    CHILD_CHECK(GNI_MsgqGetConnAttrs(cli.q, cl.addr(0), &s->attrs[1], &s->attrs_size[1]) == GNI_RC_SUCCESS);
    barrier(s, 1, 3);
    barrier(s, 2, 3);
    barrier(s, 3, 3);
    barrier(s, 4, 3);
    if (cl.fabric() && !across_hosts_ofi()) {
      // The target's daemon stored every message; none had to wait there for room.
      auto r = cl.status(1)["msgq_relay"];
      CHILD_CHECK(r["delivered"].get<uint64_t>() == kDepth);
      CHILD_CHECK(r["held"].get<uint64_t>() == 0);
    }
    CHILD_CHECK(GNI_MsgqProgress(cli.q, 0) == GNI_RC_SUCCESS);
    CHILD_CHECK(cli.rx.got == kDepth);
    barrier(s, 5, 3);
    cli.receive_until(2 * kN);
    CHILD_CHECK(cli.rx.bad == 0 && cli.rx.next[1] == kN && cli.rx.next[2] == kN);
    barrier(s, 6, 3);
    CHILD_CHECK(GNI_MsgqRelease(cli.q) == GNI_RC_SUCCESS);
    return 0;
  });
  pid_t one = cl.spawn(0, sender(1)), two = cl.spawn(0, sender(2));
  CHECK(cl.wait(one, 120) == 0);
  CHECK(cl.wait(two, 120) == 0);
  CHECK(cl.wait(receiver, 120) == 0);
  if (across_hosts_ofi()) {
    // Rank to rank: nothing through the daemons, every message (and the one for inst 99) an
    // ofi op, served by the receiver's rank.
    auto out = cl.status(0), in = cl.status(1);
    CHECK(out["msgq_relay"]["forwarded"].get<uint64_t>() == 0);
    CHECK(in["msgq_relay"]["delivered"].get<uint64_t>() == 0);
    CHECK(out["ofi"]["ops"].get<uint64_t>() >= 2 * kN + 1);
    CHECK(in["ofi"]["served"].get<uint64_t>() == 2 * kN);
    CHECK(in["ofi"]["dropped"].get<uint64_t>() == 0);
    CHECK(out["ofi"]["dropped"].get<uint64_t>() == 0);
  } else if (cl.fabric()) {
    auto in = cl.status(1)["msgq_relay"], out = cl.status(0)["msgq_relay"];
    CHECK(in["delivered"].get<uint64_t>() == 2 * kN);
    CHECK(in["held"].get<uint64_t>() == 0);
    CHECK(in["overflow"].get<uint64_t>() == 0);
    CHECK(out["forwarded"].get<uint64_t>() == 2 * kN + 1);  // and the one for inst 99
    CHECK(out["send_failed"].get<uint64_t>() == 0);
    CHECK(out["completed"].get<uint64_t>() == 2 * kN + 1);
    CHECK(out["completed_errors"].get<uint64_t>() == 1);
    CHECK(in["undeliverable"].get<uint64_t>() == 1);
  }
}

TEST_CASE_FIXTURE(TwoNodes, "flow control, size errors and connection errors between two nodes") {
  Shared* s = make_shared_state();
  const gni_msgq_attr_t attrs = make_attrs(4, 1);
  pid_t sender = cl.spawn(0, [&] {
    Client cli;
    CHILD_CHECK(cli.init(1, c, attrs, cl.addr(1)) == GNI_RC_SUCCESS);
    barrier(s, 0, 2);
    // Not connected yet: no TxConn for node 1 on this node.
    CHILD_CHECK(cli.send(cl.addr(1), 3, 0, 0, 0) == GNI_RC_NO_MATCH);
    barrier(s, 1, 2);  // node 1 has opened its ring for us
    gni_msgq_ep_attr_t peer{};
    std::memcpy(&peer, &s->attrs[1], s->attrs_size[1]);
    gni_msgq_ep_attr_t wrong = peer;
    wrong.pe_addr = 77;
    CHILD_CHECK(GNI_MsgqConnect(cli.q, cl.addr(1), &wrong) == GNI_RC_INVALID_PARAM);
    wrong = peer;
    wrong.max_msg_sz = 128;
    CHILD_CHECK(GNI_MsgqConnect(cli.q, cl.addr(1), &wrong) == GNI_RC_INVALID_PARAM);
    CHILD_CHECK(GNI_MsgqConnect(cli.q, cl.addr(1), nullptr) == GNI_RC_INVALID_PARAM);
    CHILD_CHECK(GNI_MsgqConnect(cli.q, cl.addr(1), &peer) == GNI_RC_SUCCESS);
    // Sizes: header + message at most max_msg_sz (64 here), and never above 128.
    Hdr h{1, 0, 0, 0};
    char big[200] = {};
    gni_ep_handle_t ep = cli.ep(cl.addr(1), 3);
    CHILD_CHECK(GNI_MsgqSend(cli.q, ep, &h, sizeof h, big, 64 - sizeof h + 1, 9, 0) == GNI_RC_SIZE_ERROR);
    CHILD_CHECK(GNI_MsgqSend(cli.q, ep, &h, sizeof h, big, 129, 9, 0) == GNI_RC_SIZE_ERROR);
    CHILD_CHECK(GNI_MsgqSend(cli.q, ep, nullptr, 4, big, 4, 9, 0) == GNI_RC_INVALID_PARAM);
    CHILD_CHECK(GNI_MsgqSend(cli.q, nullptr, &h, sizeof h, big, 4, 9, 0) == GNI_RC_INVALID_PARAM);
    CHILD_CHECK(GNI_MsgqSend(nullptr, ep, &h, sizeof h, big, 4, 9, 0) == GNI_RC_INVALID_PARAM);
    gni_ep_handle_t unbound;
    CHILD_CHECK(GNI_EpCreate(cli.g.nic, cli.g.cq, &unbound) == GNI_RC_SUCCESS);
    CHILD_CHECK(GNI_MsgqSend(cli.q, unbound, &h, sizeof h, big, 4, 9, 0) == GNI_RC_INVALID_PARAM);
    // A destination instance that is not in its node's queue.
    CHILD_CHECK(cli.send(cl.addr(1), 99, 0, 0, 0) == GNI_RC_INVALID_STATE);
    // The ring holds 4 messages: the fifth waits for the receiver.
    for (uint32_t seq = 0; seq < 4; ++seq) CHILD_CHECK(cli.send(cl.addr(1), 3, seq, 10 + seq, seq) == GNI_RC_SUCCESS);
    CHILD_CHECK(cli.send(cl.addr(1), 3, 4, 14, 4) == GNI_RC_NOT_DONE);
    CHILD_CHECK(GNI_MsgqIdle(cli.q) == GNI_RC_NOT_DONE);  // sent, not yet taken
    cli.drain_send_events();
    CHILD_CHECK(cli.next_event_id == 4);  // no event for the refused send
    barrier(s, 2, 2);
    barrier(s, 3, 2);  // the receiver progressed
    CHILD_CHECK(cli.send(cl.addr(1), 3, 4, 14, 4) == GNI_RC_SUCCESS);
    cli.drain_send_events();
    CHILD_CHECK(cli.next_event_id == 5);
    barrier(s, 4, 2);
    CHILD_CHECK(GNI_MsgqIdle(cli.q) == GNI_RC_SUCCESS);
    // Released from this side: sending needs a new GNI_MsgqConnect.
    CHILD_CHECK(GNI_MsgqConnRelease(cli.q, cl.addr(1)) == GNI_RC_SUCCESS);
    CHILD_CHECK(GNI_MsgqConnRelease(cli.q, cl.addr(1)) == GNI_RC_NO_MATCH);
    CHILD_CHECK(cli.send(cl.addr(1), 3, 5, 0, 5) == GNI_RC_NO_MATCH);
    barrier(s, 5, 2);
    CHILD_CHECK(GNI_MsgqRelease(cli.q) == GNI_RC_SUCCESS);
    return 0;
  });
  pid_t receiver = cl.spawn(1, [&] {
    Client cli;
    CHILD_CHECK(cli.init(3, c, attrs, cl.addr(0)) == GNI_RC_SUCCESS);
    barrier(s, 0, 2);
    CHILD_CHECK(GNI_MsgqGetConnAttrs(cli.q, cl.addr(0), &s->attrs[1], &s->attrs_size[1]) == GNI_RC_SUCCESS);
    CHILD_CHECK(s->attrs[1].num_insts == 1 && s->attrs[1].insts[0].id == 3);
    barrier(s, 1, 2);
    barrier(s, 2, 2);
    // The sender's messages wait for us: releasing now would lose them.
    CHILD_CHECK(GNI_MsgqConnRelease(cli.q, cl.addr(0)) == GNI_RC_NOT_DONE);
    CHILD_CHECK(GNI_MsgqRelease(cli.q) == GNI_RC_NOT_DONE);
    CHILD_CHECK(GNI_MsgqProgress(cli.q, 0) == GNI_RC_SUCCESS);
    CHILD_CHECK(cli.rx.got == 4);
    barrier(s, 3, 2);
    cli.receive_until(5);
    CHILD_CHECK(cli.rx.bad == 0 && cli.rx.next[1] == 5);
    barrier(s, 4, 2);
    barrier(s, 5, 2);
    CHILD_CHECK(GNI_MsgqRelease(cli.q) == GNI_RC_SUCCESS);
    return 0;
  });
  CHECK(cl.wait(sender, 60) == 0);
  CHECK(cl.wait(receiver, 60) == 0);
}

TEST_CASE_FIXTURE(OneNode, "attributes and parameters: mismatch, limits, loopback, callbacks") {
  pid_t p = cl.spawn(0, [&] {
    const uint32_t pe = cl.addr(0);
    gni_msgq_attr_t a = make_attrs(4, 2, 0);  // non-blocking mode
    Client one, two, three;
    gni_msgq_attr_t bad = a;
    bad.max_msg_sz = 129;
    CHILD_CHECK(one.init(1, c, bad, pe) == GNI_RC_INVALID_PARAM);
    CHILD_CHECK(GNI_MsgqInit(one.g.nic, on_message, &one.rx, one.scq, nullptr, &one.q) == GNI_RC_INVALID_PARAM);
    CHILD_CHECK(GNI_MsgqInit(one.g.nic, on_message, &one.rx, two.scq, &a, nullptr) == GNI_RC_INVALID_PARAM);
    CHILD_CHECK(GNI_MsgqInit(one.g.nic, on_message, &one.rx, one.scq, &a, &one.q) == GNI_RC_SUCCESS);
    gni_msgq_handle_t again;
    CHILD_CHECK(GNI_MsgqInit(one.g.nic, on_message, &one.rx, one.scq, &a, &again) == GNI_RC_INVALID_STATE);
    // A second instance of the node must bring identical attributes.
    gni_msgq_attr_t other = a;
    other.smsg_q_sz = 8;
    CHILD_CHECK(two.init(2, c, other, pe) == GNI_RC_INVALID_STATE);
    other = a;
    other.rcv_cq_sz = 17;
    CHILD_CHECK(GNI_MsgqInit(two.g.nic, on_message, &two.rx, two.scq, &other, &two.q) == GNI_RC_INVALID_STATE);
    CHILD_CHECK(GNI_MsgqInit(two.g.nic, on_message, &two.rx, two.scq, &a, &two.q) == GNI_RC_SUCCESS);
    // nloc_insts is 2: a third instance does not fit.
    CHILD_CHECK(three.init(3, c, a, pe) == GNI_RC_INVALID_STATE);

    // Non-blocking mode: only polls (0 or -1) are allowed. Nothing there: all processed.
    CHILD_CHECK(GNI_MsgqProgress(one.q, 5) == GNI_RC_INVALID_PARAM);
    CHILD_CHECK(GNI_MsgqProgress(one.q, 0) == GNI_RC_SUCCESS);
    CHILD_CHECK(GNI_MsgqProgress(one.q, UINT32_MAX) == GNI_RC_SUCCESS);
    CHILD_CHECK(one.rx.got == 0);
    CHILD_CHECK(GNI_MsgqProgress(nullptr, 0) == GNI_RC_INVALID_PARAM);

    // Connections: num_msgq_eps (2) of them; asking again for one gives the same ring.
    gni_msgq_ep_attr_t ea, eb, ec;
    uint32_t sz;
    CHILD_CHECK(GNI_MsgqGetConnAttrs(one.q, 500, &ea, &sz) == GNI_RC_SUCCESS);
    CHILD_CHECK(GNI_MsgqGetConnAttrs(two.q, 500, &eb, &sz) == GNI_RC_SUCCESS);
    CHILD_CHECK(ea.insts[0].mdh.qword2 == eb.insts[0].mdh.qword2 && ea.insts[0].mdh_off == eb.insts[0].mdh_off);
    CHILD_CHECK(GNI_MsgqGetConnAttrs(one.q, pe, &ea, &sz) == GNI_RC_SUCCESS);
    CHILD_CHECK(GNI_MsgqGetConnAttrs(one.q, 501, &ec, &sz) == GNI_RC_ERROR_RESOURCE);
    CHILD_CHECK(GNI_MsgqGetConnAttrs(one.q, 501, nullptr, &sz) == GNI_RC_INVALID_PARAM);
    CHILD_CHECK(GNI_MsgqConnRelease(one.q, 500) == GNI_RC_SUCCESS);
    CHILD_CHECK(GNI_MsgqConnRelease(one.q, 500) == GNI_RC_NO_MATCH);
    CHILD_CHECK(GNI_MsgqGetConnAttrs(one.q, 501, &ec, &sz) == GNI_RC_SUCCESS);  // the freed slot

    // Loopback: this node connected to itself; messages between the two local instances.
    CHILD_CHECK(ea.num_insts == 2);
    CHILD_CHECK(GNI_MsgqConnect(one.q, pe, &ea) == GNI_RC_SUCCESS);
    two.rx.expect_pe = pe;
    one.rx.expect_pe = pe;
    one.next_event_id = 100;
    CHILD_CHECK(one.send(pe, 2, 0, 5, 100) == GNI_RC_SUCCESS);
    CHILD_CHECK(one.send(pe, 1, 0, 6, 101) == GNI_RC_SUCCESS);  // to itself
    CHILD_CHECK(one.send(pe, 77, 0, 6, 999) == GNI_RC_INVALID_STATE);  // never joined
    // Releasing with a message waiting would lose it.
    CHILD_CHECK(GNI_MsgqRelease(two.q) == GNI_RC_NOT_DONE);
    CHILD_CHECK(GNI_MsgqIdle(two.q) == GNI_RC_NOT_DONE);
    CHILD_CHECK(GNI_MsgqProgress(two.q, 0) == GNI_RC_SUCCESS);
    CHILD_CHECK(two.rx.got == 1 && two.rx.bad == 0);
    CHILD_CHECK(GNI_MsgqProgress(one.q, UINT32_MAX) == GNI_RC_SUCCESS);
    CHILD_CHECK(one.rx.got == 1 && one.rx.bad == 0);

    // A callback returning 0 ends the progress call after that message; the others wait
    // ("messages could still be available": NOT_DONE).
    one.rx.ret = 0;
    for (uint32_t seq = 1; seq <= 3; ++seq) CHILD_CHECK(one.send(pe, 1, seq, 0, 101 + seq) == GNI_RC_SUCCESS);
    CHILD_CHECK(GNI_MsgqProgress(one.q, 0) == GNI_RC_NOT_DONE);
    CHILD_CHECK(one.rx.got == 2);
    one.rx.ret = 1;
    CHILD_CHECK(GNI_MsgqProgress(one.q, 0) == GNI_RC_SUCCESS);
    CHILD_CHECK(one.rx.got == 4 && one.rx.bad == 0);
    one.drain_send_events();
    CHILD_CHECK(one.next_event_id == 105);  // one MSGQ event per accepted send, in order
    CHILD_CHECK(GNI_MsgqIdle(one.q) == GNI_RC_SUCCESS);

    // All members gone: the segment is reclaimed, and new attributes are welcome.
    CHILD_CHECK(GNI_MsgqRelease(two.q) == GNI_RC_SUCCESS);
    CHILD_CHECK(GNI_MsgqRelease(one.q) == GNI_RC_SUCCESS);
    CHILD_CHECK(cl.status(0)["msgq"].empty());
    // A send-only instance (no callback, no send CQ: what Charm++ creates).
    gni_msgq_attr_t charm{128, 1, 1, 2, 8, 0, 16};
    gni_msgq_handle_t sq;
    CHILD_CHECK(GNI_MsgqInit(three.g.nic, nullptr, nullptr, nullptr, &charm, &sq) == GNI_RC_SUCCESS);
    CHILD_CHECK(GNI_MsgqProgress(sq, 0) == GNI_RC_INVALID_STATE);
    CHILD_CHECK(GNI_MsgqRelease(sq) == GNI_RC_SUCCESS);
    CHILD_CHECK(GNI_MsgqRelease(nullptr) == GNI_RC_INVALID_PARAM);
    CHILD_CHECK(GNI_MsgqIdle(nullptr) == GNI_RC_INVALID_PARAM);
    return 0;
  });
  CHECK(cl.wait(p, 60) == 0);
}

// Cray's gni_pub.h: GNI_MsgqProgress returns GNI_RC_SUCCESS when "all messages were
// processed" and GNI_RC_NOT_DONE when "messages could still be available for processing"; the
// documented codes have no TIMEOUT. A queue with nothing for us has nothing left to process.
TEST_CASE_FIXTURE(OneNode, "GNI_MsgqProgress on an empty queue: SUCCESS for a poll and for a blocking call whose timeout ran out") {
  pid_t p = cl.spawn(0, [&] {
    using clock = std::chrono::steady_clock;
    auto ms_since = [](clock::time_point t0) {
      return std::chrono::duration_cast<std::chrono::milliseconds>(clock::now() - t0).count();
    };
    const uint32_t pe = cl.addr(0);
    Client cli;
    CHILD_CHECK(cli.init(1, c, make_attrs(4, 1), pe) == GNI_RC_SUCCESS);  // GNI_MSGQ_MODE_BLOCKING
    // Polls (0, and -1 as Cray's examples pass it).
    CHILD_CHECK(GNI_MsgqProgress(cli.q, 0) == GNI_RC_SUCCESS);
    CHILD_CHECK(GNI_MsgqProgress(cli.q, UINT32_MAX) == GNI_RC_SUCCESS);
    // A blocking call waits its whole timeout for a first message, then answers SUCCESS.
    auto t0 = clock::now();
    CHILD_CHECK(GNI_MsgqProgress(cli.q, 50) == GNI_RC_SUCCESS);
    CHILD_CHECK(ms_since(t0) >= 45);
    CHILD_CHECK(cli.rx.got == 0);

    // Connected to its own node, still nothing sent: the same.
    gni_msgq_ep_attr_t ea;
    uint32_t sz;
    CHILD_CHECK(GNI_MsgqGetConnAttrs(cli.q, pe, &ea, &sz) == GNI_RC_SUCCESS);
    CHILD_CHECK(GNI_MsgqConnect(cli.q, pe, &ea) == GNI_RC_SUCCESS);
    cli.rx.expect_pe = pe;
    t0 = clock::now();
    CHILD_CHECK(GNI_MsgqProgress(cli.q, 20) == GNI_RC_SUCCESS);
    CHILD_CHECK(ms_since(t0) >= 15);
    CHILD_CHECK(GNI_MsgqProgress(cli.q, 0) == GNI_RC_SUCCESS);

    // A message waiting: the blocking call delivers it and returns at once, not at its timeout.
    CHILD_CHECK(cli.send(pe, 1, 0, 9, 0) == GNI_RC_SUCCESS);
    t0 = clock::now();
    CHILD_CHECK(GNI_MsgqProgress(cli.q, 10000) == GNI_RC_SUCCESS);
    CHILD_CHECK(ms_since(t0) < 5000);
    CHILD_CHECK(cli.rx.got == 1 && cli.rx.bad == 0);
    // Drained: empty again, for a blocking call and for the loop programs write.
    t0 = clock::now();
    CHILD_CHECK(GNI_MsgqProgress(cli.q, 30) == GNI_RC_SUCCESS);
    CHILD_CHECK(ms_since(t0) >= 25);
    uint32_t not_done = 0;
    while (GNI_MsgqProgress(cli.q, 10) == GNI_RC_NOT_DONE) CHILD_CHECK(++not_done < 100);
    CHILD_CHECK(not_done == 0 && cli.rx.got == 1);
    cli.drain_send_events();
    CHILD_CHECK(cli.next_event_id == 1);
    CHILD_CHECK(GNI_MsgqIdle(cli.q) == GNI_RC_SUCCESS);
    CHILD_CHECK(GNI_MsgqRelease(cli.q) == GNI_RC_SUCCESS);
    return 0;
  });
  CHECK(cl.wait(p, 60) == 0);
}

TEST_CASE_FIXTURE(OneNode, "GNI_MsgqProgress: a callback returning 0 gives NOT_DONE with messages left, a later call delivers them") {
  pid_t p = cl.spawn(0, [&] {
    const uint32_t pe = cl.addr(0);
    Client cli;
    CHILD_CHECK(cli.init(1, c, make_attrs(8, 1), pe) == GNI_RC_SUCCESS);
    gni_msgq_ep_attr_t ea;
    uint32_t sz;
    CHILD_CHECK(GNI_MsgqGetConnAttrs(cli.q, pe, &ea, &sz) == GNI_RC_SUCCESS);
    CHILD_CHECK(GNI_MsgqConnect(cli.q, pe, &ea) == GNI_RC_SUCCESS);  // loopback: sends to itself
    for (uint32_t seq = 0; seq < 3; ++seq) CHILD_CHECK(cli.send(pe, 1, seq, seq, seq) == GNI_RC_SUCCESS);
    cli.rx.ret = 0;  // stop after each message
    CHILD_CHECK(GNI_MsgqProgress(cli.q, 0) == GNI_RC_NOT_DONE);
    CHILD_CHECK(cli.rx.got == 1);
    // A blocking call that finds a message returns after it, NOT_DONE (two were left).
    auto t0 = std::chrono::steady_clock::now();
    CHILD_CHECK(GNI_MsgqProgress(cli.q, 10000) == GNI_RC_NOT_DONE);
    CHILD_CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
    CHILD_CHECK(cli.rx.got == 2);
    // Messages left wait for the next call; this one lets progress go on: all processed.
    cli.rx.ret = 1;
    CHILD_CHECK(GNI_MsgqProgress(cli.q, 0) == GNI_RC_SUCCESS);
    CHILD_CHECK(cli.rx.got == 3 && cli.rx.bad == 0 && cli.rx.next[1] == 3);
    CHILD_CHECK(GNI_MsgqProgress(cli.q, 0) == GNI_RC_SUCCESS);
    CHILD_CHECK(cli.rx.got == 3);
    // Stopped on the last message: the call cannot know nothing is left (NOT_DONE); the next
    // one finds nothing (SUCCESS).
    CHILD_CHECK(cli.send(pe, 1, 3, 0, 3) == GNI_RC_SUCCESS);
    cli.rx.ret = 0;
    CHILD_CHECK(GNI_MsgqProgress(cli.q, 0) == GNI_RC_NOT_DONE);
    CHILD_CHECK(cli.rx.got == 4);
    CHILD_CHECK(GNI_MsgqProgress(cli.q, 0) == GNI_RC_SUCCESS);
    CHILD_CHECK(cli.rx.got == 4 && cli.rx.bad == 0);
    cli.drain_send_events();
    CHILD_CHECK(cli.next_event_id == 4);
    CHILD_CHECK(GNI_MsgqIdle(cli.q) == GNI_RC_SUCCESS);
    CHILD_CHECK(GNI_MsgqRelease(cli.q) == GNI_RC_SUCCESS);
    return 0;
  });
  CHECK(cl.wait(p, 60) == 0);
}

// What Cray programs do once their exchange is over: drain the queue with
// `while (GNI_MsgqProgress(q, t) == GNI_RC_NOT_DONE)`. The loop delivers what is left and
// ends once nothing is. Also run across hosts (msgq-fabric).
TEST_CASE_FIXTURE(TwoNodes, "two nodes: after the exchange, while (GNI_MsgqProgress(q, t) == GNI_RC_NOT_DONE) ends") {
  Shared* s = make_shared_state();
  constexpr uint32_t kN = 6;
  const gni_msgq_attr_t attrs = make_attrs(8, 1);
  auto proc = [&](int node) {
    return [&, node] {
      const uint32_t other_pe = cl.addr(1 - node);
      const uint32_t inst = node == 0 ? 1 : 3, other = node == 0 ? 3 : 1;
      Client cli;
      CHILD_CHECK(cli.init(inst, c, attrs, other_pe) == GNI_RC_SUCCESS);
      barrier(s, 0, 2);
      connect_nodes(s, cli, node, other_pe, 2, 1);
      barrier(s, 2, 2);
      // Round 0: the callback lets progress go on, blocking drain loop (10 ms). Round 1: it
      // stops every call after one message, polling drain loop.
      for (uint32_t round = 0; round < 2; ++round) {
        const uint32_t timeout = round == 0 ? 10 : 0;
        cli.rx.ret = round == 0 ? 1 : 0;
        auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
        for (uint32_t i = 0; i < kN; ++i) {
          const uint32_t seq = round * kN + i;
          gni_return_t rc;
          while ((rc = cli.send(other_pe, other, seq, seq % 40, seq)) == GNI_RC_NOT_DONE) {
            CHILD_CHECK(std::chrono::steady_clock::now() < deadline);  // credits still coming back
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
          }
          CHILD_CHECK(rc == GNI_RC_SUCCESS);
        }
        cli.wait_send_events((round + 1) * kN);  // stored in the other node's ring
        barrier(s, 3 + 2 * round, 2);            // so every message for us is in ours
        uint32_t not_done = 0;
        gni_return_t rc;
        while ((rc = GNI_MsgqProgress(cli.q, timeout)) == GNI_RC_NOT_DONE)
          CHILD_CHECK(++not_done <= 10 * kN);  // a loop that would never end fails here
        CHILD_CHECK(rc == GNI_RC_SUCCESS);
        CHILD_CHECK(cli.rx.got == (round + 1) * kN && cli.rx.bad == 0);
        CHILD_CHECK(cli.rx.next[other] == (round + 1) * kN);
        if (round == 1) CHILD_CHECK(not_done >= kN);  // each call stopped after its message
        // Nothing more for us: the same loop ends at once.
        CHILD_CHECK(GNI_MsgqProgress(cli.q, timeout) == GNI_RC_SUCCESS);
        CHILD_CHECK(cli.rx.got == (round + 1) * kN);
        barrier(s, 4 + 2 * round, 2);
      }
      CHILD_CHECK(GNI_MsgqIdle(cli.q) == GNI_RC_SUCCESS);
      CHILD_CHECK(GNI_MsgqRelease(cli.q) == GNI_RC_SUCCESS);
      return 0;
    };
  };
  pid_t a = cl.spawn(0, proc(0)), b = cl.spawn(1, proc(1));
  CHECK(cl.wait(a, 90) == 0);
  CHECK(cl.wait(b, 90) == 0);
}

TEST_CASE_FIXTURE(TwoNodes, "blocking progress sleeps until a message comes, and wakes with an error when the NIC goes down") {
  Shared* s = make_shared_state();
  const gni_msgq_attr_t attrs = make_attrs(4, 1);
  pid_t receiver = cl.spawn(1, [&] {
    Client cli;
    CHILD_CHECK(cli.init(3, c, attrs, cl.addr(0)) == GNI_RC_SUCCESS);
    barrier(s, 0, 2);
    connect_nodes(s, cli, 1, cl.addr(0), 2, 1);
    barrier(s, 2, 2);
    // Blocked here before the sender sends (it waits for flag 0).
    s->flag[0] = 1;
    CHILD_CHECK(GNI_MsgqProgress(cli.q, 20000) == GNI_RC_SUCCESS);
    CHILD_CHECK(cli.rx.got == 1 && cli.rx.bad == 0);
    s->flag[1] = 1;
    // Nothing more comes; the test stops our daemon while we sleep.
    gni_return_t rc = GNI_MsgqProgress(cli.q, 20000);
    CHILD_CHECK(rc == GNI_RC_INVALID_STATE);
    return 0;
  });
  pid_t sender = cl.spawn(0, [&] {
    Client cli;
    CHILD_CHECK(cli.init(1, c, attrs, cl.addr(1)) == GNI_RC_SUCCESS);
    barrier(s, 0, 2);
    connect_nodes(s, cli, 0, cl.addr(1), 2, 1);
    barrier(s, 2, 2);
    while (s->flag[0].load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // let the receiver fall asleep
    CHILD_CHECK(cli.send(cl.addr(1), 3, 0, 8, 0) == GNI_RC_SUCCESS);
    return 0;
  });
  CHECK(cl.wait(sender, 60) == 0);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (s->flag[1].load() == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  cl.stop_daemon(1);
  CHECK(cl.wait(receiver, 15) == 0);  // well before its 20 s timeout
}

TEST_CASE_FIXTURE(TwoNodes, "a dead receiver: senders get INVALID_STATE, its queued messages stop blocking the ring") {
  Shared* s = make_shared_state();
  const gni_msgq_attr_t attrs = make_attrs(4, 2);
  pid_t victim = cl.spawn(1, [&]() -> int {
    Client cli;
    CHILD_CHECK(cli.init(4, c, attrs, cl.addr(0)) == GNI_RC_SUCCESS);
    barrier(s, 0, 3);
    barrier(s, 1, 3);
    barrier(s, 2, 3);
    for (;;) pause();  // never progresses; killed by the test
  });
  pid_t survivor = cl.spawn(1, [&] {
    Client cli;
    CHILD_CHECK(cli.init(3, c, attrs, cl.addr(0)) == GNI_RC_SUCCESS);
    barrier(s, 0, 3);
    connect_nodes(s, cli, 1, cl.addr(0), 3, 1);
    barrier(s, 2, 3);
    cli.receive_until(1);
    CHILD_CHECK(cli.rx.bad == 0 && cli.rx.next[1] == 1);
    s->flag[2] = 1;
    // The sender dies next; the reply to it fails instead of waiting forever.
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    gni_return_t rc;
    while ((rc = cli.send(cl.addr(0), 1, 0, 0, 0)) == GNI_RC_SUCCESS || rc == GNI_RC_NOT_DONE) {
      CHILD_CHECK(std::chrono::steady_clock::now() < deadline);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    CHILD_CHECK(rc == GNI_RC_INVALID_STATE);
    // The victim's four messages were voided (counted) to let ours through.
    auto st = cl.status(1);
    CHILD_CHECK(st["msgq"].size() == 1 && st["msgq"][0]["voided"] == 4 && st["msgq"][0]["members"] == 1);
    return 0;
  });
  pid_t sender = cl.spawn(0, [&]() -> int {
    Client cli;
    CHILD_CHECK(cli.init(1, c, attrs, cl.addr(1)) == GNI_RC_SUCCESS);
    barrier(s, 0, 3);
    connect_nodes(s, cli, 0, cl.addr(1), 3, 1);
    barrier(s, 2, 3);
    for (uint32_t seq = 0; seq < 4; ++seq) CHILD_CHECK(cli.send(cl.addr(1), 4, seq, 0, seq) == GNI_RC_SUCCESS);
    CHILD_CHECK(cli.send(cl.addr(1), 4, 4, 0, 4) == GNI_RC_NOT_DONE);
    CHILD_CHECK(cli.send(cl.addr(1), 3, 0, 0, 4) == GNI_RC_NOT_DONE);  // the victim's messages fill the ring
    s->flag[0] = 1;  // the test kills the victim now
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    gni_return_t rc;
    while ((rc = cli.send(cl.addr(1), 4, 4, 0, 4)) == GNI_RC_NOT_DONE) {
      CHILD_CHECK(std::chrono::steady_clock::now() < deadline);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    CHILD_CHECK(rc == GNI_RC_INVALID_STATE);
    // Its four messages are voided on the way: the survivor's message gets through.
    CHILD_CHECK(cli.send(cl.addr(1), 3, 0, 7, 4) == GNI_RC_SUCCESS);
    while (s->flag[2].load() == 0) {
      CHILD_CHECK(std::chrono::steady_clock::now() < deadline);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    for (;;) pause();  // killed by the test: a dead sender
  });
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (s->flag[0].load() == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  kill(victim, SIGKILL);
  CHECK(cl.wait(victim) == 128 + SIGKILL);
  while (s->flag[2].load() == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  kill(sender, SIGKILL);
  CHECK(cl.wait(sender) == 128 + SIGKILL);
  CHECK(cl.wait(survivor, 60) == 0);
  // Each node lost its last member: both segments are reclaimed.
  CHECK(cl.status(0)["msgq"].empty());
  CHECK(cl.status(1)["msgq"].empty());
}

TEST_CASE_FIXTURE(TwoNodes, "forged ring entries are counted and dropped, genuine ones delivered") {
  Shared* s = make_shared_state();
  const gni_msgq_attr_t attrs = make_attrs(8, 1);
  pid_t receiver = cl.spawn(1, [&] {
    Client cli;
    CHILD_CHECK(cli.init(3, c, attrs, cl.addr(0)) == GNI_RC_SUCCESS);
    CHILD_CHECK(GNI_MsgqGetConnAttrs(cli.q, cl.addr(0), &s->attrs[1], &s->attrs_size[1]) == GNI_RC_SUCCESS);
    barrier(s, 0, 2);
    barrier(s, 1, 2);  // the forger wrote its entries
    cli.receive_until(1);
    // The forged entries were dropped, the genuine one delivered: nothing left to process.
    CHILD_CHECK(GNI_MsgqProgress(cli.q, 0) == GNI_RC_SUCCESS);
    CHILD_CHECK(cli.rx.got == 1 && cli.rx.bad == 0);
    auto st = cl.status(1);
    CHILD_CHECK(st["msgq"][0]["malformed"] == 2);
    CHILD_CHECK(st["msgq"][0]["delivered"] == 1);
    return 0;
  });
  // A process of node 0 with the job's credential maps node 1's segment by hand and writes
  // into the ring for node 0 what no libugni would: a wrong source node, an oversized length.
  pid_t forger = cl.spawn(0, [&] {
    barrier(s, 0, 2);
    nicemu::ctl::Connection conn;
    CHILD_CHECK(conn.connect(cl.socket(1)));
    nicemu::abi::ctl::MsgqLookup req{};
    req.h.op = uint16_t(nicemu::abi::ctl::Op::kMsgqLookup);
    req.nic_addr = cl.addr(1);
    req.ptag = c.ptag;
    req.cookie = c.cookie;
    nicemu::abi::ctl::MsgqLookupReply rep{};
    int fds[2] = {-1, -1};  // tables (sealed), rings
    CHILD_CHECK(conn.call(req, rep, fds, 2) && rep.r.rc == 0 && fds[0] >= 0 && fds[1] >= 0);
    // The tables cannot be mapped writable; the rings can (that is where senders write).
    CHILD_CHECK(mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fds[0], 0) == MAP_FAILED);
    alignas(mq::SegmentHeader) unsigned char raw[sizeof(mq::SegmentHeader)];
    CHILD_CHECK(pread(fds[0], raw, sizeof raw, 0) == ssize_t(sizeof raw));
    mq::SegmentView v;
    v.attrs = reinterpret_cast<const mq::SegmentHeader*>(raw)->attrs;
    v.lay = mq::segment_layout(v.attrs);
    v.base = nicemu::abi::map_split(fds[0], fds[1], v.lay.ro_size, rep.size);
    CHILD_CHECK(v.base != nullptr);
    uint32_t ring = 0, pe = 0, gen = 0, inst = 0, mgen = 0;
    CHILD_CHECK(v.read_rx(ring, pe, gen) && pe == cl.addr(0));
    CHILD_CHECK(v.read_member(0, inst, mgen) && inst == 3);
    mq::RingView r = mq::RingView::at(v.ring(ring), v.attrs.smsg_q_sz, v.lay.slot_size);
    mq::EntryHeader e{};
    e.dst_inst = 3;
    e.dst_gen = mgen;
    e.dst_member = 0;
    e.src_inst = 1;
    Hdr h{1, 0, 0, 0};
    char body[96] = {};
    e.src_pe = 99;  // not the node this ring belongs to
    CHILD_CHECK(r.push(e, &h, sizeof h, nullptr, 0, uint32_t(getpid())) == mq::RingView::Push::kOk);
    e.src_pe = cl.addr(0);
    CHILD_CHECK(r.push(e, &h, sizeof h, body, 80 - sizeof h, uint32_t(getpid())) == mq::RingView::Push::kOk);  // > 64
    e.tag = tag_of(1, 0);
    CHILD_CHECK(r.push(e, &h, sizeof h, nullptr, 0, uint32_t(getpid())) == mq::RingView::Push::kOk);
    barrier(s, 1, 2);
    return 0;
  });
  CHECK(cl.wait(forger, 60) == 0);
  CHECK(cl.wait(receiver, 60) == 0);
}
