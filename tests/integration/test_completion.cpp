// Integration tests of completion features and queries against real daemons and processes:
// CQ writes, vector waits and monitors, interrupt masks, CQ overrun and recovery, NIC
// statistics, registration and handle queries, error subscriptions, several CDMs in one
// process, a process reaching its own NIC address, and the device type.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "harness.h"
#include "nicemu/abi/cq_entry.h"

using namespace harness;
namespace cqe = nicemu::abi::cqe;

namespace {

constexpr uint64_t kMask48 = 0xFFFFFFFFFFFFull;

uint64_t now_ms() {
  return uint64_t(std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::steady_clock::now().time_since_epoch())
                      .count());
}

void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

// A CQ write of `value` to the CQ behind `h`, in order.
gni_post_descriptor_t cqw_desc(gni_mem_handle_t h, uint64_t value, uint16_t cq_mode = GNI_CQMODE_GLOBAL_EVENT) {
  gni_post_descriptor_t d = cqwrite_desc(h, value, cq_mode);
  d.dlvr_mode = GNI_DLVMODE_IN_ORDER;
  return d;
}

// Posts a CQ write with a local event and waits for it; returns the status.
uint64_t cqwrite(gni_ep_handle_t ep, gni_cq_handle_t cq, gni_mem_handle_t h, uint64_t value) {
  gni_post_descriptor_t d = cqw_desc(h, value);
  CHILD_CHECK(GNI_PostCqWrite(ep, &d) == GNI_RC_SUCCESS);
  return wait_completion(cq, d, 5000);
}

// A CQ write without local event (the target's CQ is what the test looks at).
void cqwrite_silent(gni_ep_handle_t ep, gni_mem_handle_t h, uint64_t value) {
  gni_post_descriptor_t d = cqw_desc(h, value, GNI_CQMODE_SILENT);
  CHILD_CHECK(GNI_PostCqWrite(ep, &d) == GNI_RC_SUCCESS);
}

gni_mem_handle_t reg(Gni& g, const void* p, uint64_t len, gni_cq_handle_t dst, uint32_t flags = GNI_MEM_READWRITE) {
  return mem_register(g.nic, uint64_t(p), len, dst, flags);
}

// What a target process tells the initiator.
struct Target {
  uint32_t addr, inst;
  gni_mem_handle_t rcq_h;    // registration whose dst CQ is the target's remote-event CQ
  gni_mem_handle_t small_h;  // dst CQ: a 16-entry CQ, for overruns
  gni_mem_handle_t no_cq_h;  // registration without a dst CQ
  gni_mem_handle_t dead_h;   // deregistered
  gni_mem_handle_t vec_h[3]; // dst CQs of a vector
};

}  // namespace

TEST_CASE_FIXTURE(TwoNodes, "CQ write: 48-bit value and inst id at the target, local completion, errors, overrun") {
  const uint64_t values[] = {0xFFFF876543210ABCull, 0x1ull, 0x0000FFFFFFFFFFFFull, 0x123456789ABCull};
  pid_t t = cl.spawn(1, [&] {
    Gni g = open_gni(7, c);
    gni_cq_handle_t small;
    CHILD_CHECK(GNI_CqCreate(g.nic, 16, 0, GNI_CQ_BLOCKING, nullptr, nullptr, &small) == GNI_RC_SUCCESS);
    static char buf[4096];
    Target info{};
    info.addr = g.addr;
    info.inst = 7;
    info.rcq_h = reg(g, buf, 64, g.rcq);
    info.small_h = reg(g, buf + 64, 64, small);
    info.no_cq_h = reg(g, buf + 128, 64, nullptr);
    info.dead_h = reg(g, buf + 192, 64, g.rcq);
    CHILD_CHECK(GNI_MemDeregister(g.nic, &info.dead_h) == GNI_RC_SUCCESS);
    oob.send(1, info);

    // Every successful write arrived in order, with its low 48 bits, nothing for the others.
    CHILD_CHECK(oob.recv<int>(1) == 1);
    for (uint64_t v : values) {
      gni_cq_entry_t e;
      CHILD_CHECK(GNI_CqWaitEvent(g.rcq, 5000, &e) == GNI_RC_SUCCESS);
      CHILD_CHECK(GNI_CQ_GET_TYPE(e) == GNI_CQ_EVENT_TYPE_POST);
      CHILD_CHECK(GNI_CQ_STATUS_OK(e));
      CHILD_CHECK(GNI_CQ_GET_DATA(e) == (v & kMask48));
      CHILD_CHECK(GNI_CQ_GET_REM_INST_ID(e) == (v & 0xFFFFFFFFull));
      CHILD_CHECK(GNI_CQ_GET_INST_ID(e) == (v & 0xFFFFFFFFull));
      CHILD_CHECK(!GNI_CQ_OVERRUN(e));
    }
    gni_cq_entry_t e;
    CHILD_CHECK(GNI_CqGetEvent(g.rcq, &e) == GNI_RC_NOT_DONE);
    oob.send(1, 1);

    // 20 writes into 16 entries: the overrun is reported first, then what fitted, in order.
    CHILD_CHECK(oob.recv<int>(1) == 2);
    CHILD_CHECK(GNI_CqTestEvent(small) == GNI_RC_ERROR_RESOURCE);
    CHILD_CHECK(GNI_CqGetEvent(small, &e) == GNI_RC_ERROR_RESOURCE);
    CHILD_CHECK(GNI_CQ_OVERRUN(e));
    for (uint64_t i = 0; i < 16; ++i) {
      CHILD_CHECK(GNI_CqGetEvent(small, &e) == GNI_RC_SUCCESS);
      CHILD_CHECK(GNI_CQ_GET_DATA(e) == 100 + i);
    }
    CHILD_CHECK(GNI_CqGetEvent(small, &e) == GNI_RC_NOT_DONE);
    CHILD_CHECK(GNI_CqTestEvent(small) == GNI_RC_NOT_DONE);
    // Recovery: the drained CQ works again.
    oob.send(1, 2);
    for (uint64_t i = 0; i < 3; ++i) {
      CHILD_CHECK(GNI_CqWaitEvent(small, 5000, &e) == GNI_RC_SUCCESS);
      CHILD_CHECK(GNI_CQ_GET_DATA(e) == 200 + i && !GNI_CQ_OVERRUN(e));
    }
    CHILD_CHECK(GNI_CqGetEvent(small, &e) == GNI_RC_NOT_DONE);
    oob.send(1, 3);
    return 0;
  });
  pid_t i = cl.spawn(0, [&] {
    Gni g = open_gni(3, c);
    Target tg = oob.recv<Target>(0);
    gni_ep_handle_t ep = nullptr;
    CHILD_CHECK(GNI_EpCreate(g.nic, g.cq, &ep) == GNI_RC_SUCCESS);
    gni_post_descriptor_t d = cqw_desc(tg.rcq_h, 1);
    CHILD_CHECK(GNI_PostCqWrite(ep, &d) == GNI_RC_INVALID_PARAM);  // not bound
    CHILD_CHECK(GNI_EpBind(ep, tg.addr, tg.inst) == GNI_RC_SUCCESS);
    CHILD_CHECK(GNI_EpSetEventData(ep, 55, 66) == GNI_RC_SUCCESS);

    // Local completion: the posted descriptor comes back with every field intact.
    for (size_t k = 0; k < 3; ++k) {
      d = cqw_desc(tg.rcq_h, values[k]);
      d.post_id = 0xABC0 + k;
      d.first_operand = 0x1111;
      CHILD_CHECK(GNI_PostCqWrite(ep, &d) == GNI_RC_SUCCESS);
      gni_cq_entry_t e;
      CHILD_CHECK(GNI_CqWaitEvent(g.cq, 5000, &e) == GNI_RC_SUCCESS);
      CHILD_CHECK(GNI_CQ_GET_TYPE(e) == GNI_CQ_EVENT_TYPE_POST && GNI_CQ_GET_INST_ID(e) == 55);
      gni_post_descriptor_t* out = nullptr;
      CHILD_CHECK(GNI_GetCompleted(g.cq, e, &out) == GNI_RC_SUCCESS && out == &d);
      CHILD_CHECK(d.cqwrite_value == values[k] && d.post_id == 0xABC0 + k && d.first_operand == 0x1111);
      CHILD_CHECK(d.status == 0 && (d.cq_mode_complete & GNI_CQMODE_GLOBAL_EVENT));
    }
    // The local event goes to the descriptor's src_cq_hndl when one is given (Open MPI).
    {
      gni_cq_handle_t alt;
      CHILD_CHECK(GNI_CqCreate(g.nic, 16, 0, GNI_CQ_NOBLOCK, nullptr, nullptr, &alt) == GNI_RC_SUCCESS);
      d = cqw_desc(tg.rcq_h, values[3]);
      d.src_cq_hndl = alt;
      CHILD_CHECK(GNI_PostCqWrite(ep, &d) == GNI_RC_SUCCESS);
      gni_cq_entry_t e;
      // Across hosts the event comes when the target's daemon has answered.
      gni_return_t rc = GNI_RC_NOT_DONE;
      for (int spins = 0; spins < 5000 && rc == GNI_RC_NOT_DONE; ++spins) {
        rc = GNI_CqGetEvent(alt, &e);
        if (rc == GNI_RC_NOT_DONE) usleep(1000);
      }
      CHILD_CHECK(rc == GNI_RC_SUCCESS);
      gni_cq_entry_t none;
      CHILD_CHECK(GNI_CqGetEvent(g.cq, &none) == GNI_RC_NOT_DONE);
      gni_post_descriptor_t* out = nullptr;
      CHILD_CHECK(GNI_GetCompleted(alt, e, &out) == GNI_RC_SUCCESS && out == &d);
    }
    // Bad handles are error completions at the initiator (and nothing at the target).
    gni_mem_handle_t forged = tg.rcq_h;
    forged.qword1 ^= 0x10;
    for (gni_mem_handle_t h : {tg.no_cq_h, tg.dead_h, forged}) {
      d = cqw_desc(h, 0x5555);
      CHILD_CHECK(GNI_PostCqWrite(ep, &d) == GNI_RC_SUCCESS);
      CHILD_CHECK(wait_completion(g.cq, d, 5000) == cqe::kErrProtection);
      CHILD_CHECK(d.status == cqe::kErrProtection);
    }
    // Parameters the API refuses.
    d = cqw_desc(tg.rcq_h, 1);
    d.type = GNI_POST_FMA_PUT;
    CHILD_CHECK(GNI_PostCqWrite(ep, &d) == GNI_RC_INVALID_PARAM);
    d = cqw_desc(tg.rcq_h, 1, GNI_CQMODE_DUAL_EVENTS);  // needs GNI_CDM_MODE_DUAL_EVENTS
    CHILD_CHECK(GNI_PostCqWrite(ep, &d) == GNI_RC_INVALID_PARAM);
    CHILD_CHECK(GNI_PostCqWrite(nullptr, &d) == GNI_RC_INVALID_PARAM);
    CHILD_CHECK(GNI_PostCqWrite(ep, nullptr) == GNI_RC_INVALID_PARAM);
    oob.send(0, 1);
    CHILD_CHECK(oob.recv<int>(0) == 1);

    // Overrun: 20 silent writes into the target's 16-entry CQ.
    for (uint64_t k = 0; k < 20; ++k) cqwrite_silent(ep, tg.small_h, 100 + k);
    // Silent writes have no completion of their own; across hosts they are still on their
    // way. A completed post to the same target comes after them (in order per peer).
    d = cqw_desc(tg.no_cq_h, 0x5555);
    CHILD_CHECK(GNI_PostCqWrite(ep, &d) == GNI_RC_SUCCESS);
    CHILD_CHECK(wait_completion(g.cq, d, 5000) == cqe::kErrProtection);
    oob.send(0, 2);
    CHILD_CHECK(oob.recv<int>(0) == 2);
    for (uint64_t k = 0; k < 3; ++k) CHILD_CHECK(cqwrite(ep, g.cq, tg.small_h, 200 + k) == 0);
    CHILD_CHECK(oob.recv<int>(0) == 3);
    return 0;
  });
  CHECK(cl.wait(i) == 0);
  CHECK(cl.wait(t) == 0);
}

TEST_CASE_FIXTURE(OneNode, "vector wait and monitor: producer in another process, timeouts, monitor does not dequeue, masks") {
  pid_t w = cl.spawn(0, [&] {
    Gni g = open_gni(1, c);
    gni_cq_handle_t v[3], nb;
    for (auto& q : v) CHILD_CHECK(GNI_CqCreate(g.nic, 64, 0, GNI_CQ_BLOCKING, nullptr, nullptr, &q) == GNI_RC_SUCCESS);
    CHILD_CHECK(GNI_CqCreate(g.nic, 64, 0, GNI_CQ_NOBLOCK, nullptr, nullptr, &nb) == GNI_RC_SUCCESS);
    static char buf[4096];
    Target info{};
    info.addr = g.addr;
    info.inst = 1;
    for (int k = 0; k < 3; ++k) info.vec_h[k] = reg(g, buf + 64 * k, 64, v[k]);
    oob.send(0, info);

    gni_cq_entry_t e = 0;
    uint32_t which = 99;
    // Parameters.
    CHILD_CHECK(GNI_CqVectorWaitEvent(nullptr, 3, 0, &e, &which) == GNI_RC_INVALID_PARAM);
    CHILD_CHECK(GNI_CqVectorWaitEvent(v, 0, 0, &e, &which) == GNI_RC_INVALID_PARAM);
    CHILD_CHECK(GNI_CqVectorWaitEvent(v, 3, 0, nullptr, &which) == GNI_RC_INVALID_PARAM);
    CHILD_CHECK(GNI_CqVectorMonitor(v, 3, 0, nullptr) == GNI_RC_INVALID_PARAM);
    gni_cq_handle_t with_nb[2] = {v[0], nb};
    CHILD_CHECK(GNI_CqVectorWaitEvent(with_nb, 2, 0, &e, &which) == GNI_RC_ERROR_RESOURCE);
    CHILD_CHECK(GNI_CqVectorMonitor(with_nb, 2, 0, &which) == GNI_RC_ERROR_RESOURCE);
    // Timeouts.
    uint64_t t0 = now_ms();
    CHILD_CHECK(GNI_CqVectorWaitEvent(v, 3, 0, &e, &which) == GNI_RC_TIMEOUT);
    CHILD_CHECK(GNI_CqVectorWaitEvent(v, 3, 50, &e, &which) == GNI_RC_TIMEOUT);
    CHILD_CHECK(GNI_CqVectorMonitor(v, 3, 30, &which) == GNI_RC_TIMEOUT);
    uint64_t dt = now_ms() - t0;
    CHILD_CHECK(dt >= 80 && dt < 2000);

    // 1: the producer writes into CQ 2 while we sleep; the monitor reports it, twice,
    // without taking it; the vector wait then takes it.
    oob.send(0, 1);
    t0 = now_ms();
    CHILD_CHECK(GNI_CqVectorMonitor(v, 3, 5000, &which) == GNI_RC_SUCCESS && which == 2);
    CHILD_CHECK(now_ms() - t0 >= 50);  // it really slept
    CHILD_CHECK(GNI_CqTestEvent(v[2]) == GNI_RC_SUCCESS);
    which = 99;
    CHILD_CHECK(GNI_CqVectorMonitor(v, 3, 0, &which) == GNI_RC_SUCCESS && which == 2);
    which = 99;
    CHILD_CHECK(GNI_CqVectorWaitEvent(v, 3, 1000, &e, &which) == GNI_RC_SUCCESS && which == 2);
    CHILD_CHECK(GNI_CQ_GET_DATA(e) == 0x2222);
    CHILD_CHECK(GNI_CqVectorWaitEvent(v, 3, 0, &e, &which) == GNI_RC_TIMEOUT);

    // 2: entries in CQs 1 and 2: the first of the vector comes first.
    oob.send(0, 2);
    CHILD_CHECK(oob.recv<int>(0) == 2);
    CHILD_CHECK(GNI_CqVectorWaitEvent(v, 3, 1000, &e, &which) == GNI_RC_SUCCESS && which == 1);
    CHILD_CHECK(GNI_CQ_GET_DATA(e) == 0x1b);
    CHILD_CHECK(GNI_CqVectorWaitEvent(v, 3, 1000, &e, &which) == GNI_RC_SUCCESS && which == 2);
    CHILD_CHECK(GNI_CQ_GET_DATA(e) == 0x2b);

    // 3: a blocked vector wait (forever) is woken by a write into CQ 0.
    oob.send(0, 3);
    t0 = now_ms();
    CHILD_CHECK(GNI_CqVectorWaitEvent(v, 3, uint64_t(-1), &e, &which) == GNI_RC_SUCCESS && which == 0);
    CHILD_CHECK(GNI_CQ_GET_DATA(e) == 0x3333);
    CHILD_CHECK(now_ms() - t0 >= 50);

    // Interrupt masks: a count; a masked CQ makes the vector calls return NOT_DONE.
    CHILD_CHECK(GNI_CqInterruptMask(nb) == GNI_RC_INVALID_PARAM);
    CHILD_CHECK(GNI_CqInterruptMask(nullptr) == GNI_RC_INVALID_PARAM);
    CHILD_CHECK(GNI_CqInterruptUnmask(v[0]) == GNI_RC_NOT_DONE);
    CHILD_CHECK(GNI_CqInterruptMask(v[1]) == GNI_RC_SUCCESS);
    CHILD_CHECK(GNI_CqInterruptMask(v[1]) == GNI_RC_SUCCESS);
    t0 = now_ms();
    CHILD_CHECK(GNI_CqVectorWaitEvent(v, 3, 5000, &e, &which) == GNI_RC_NOT_DONE);
    CHILD_CHECK(GNI_CqVectorMonitor(v, 3, 5000, &which) == GNI_RC_NOT_DONE);
    CHILD_CHECK(now_ms() - t0 < 1000);
    gni_cq_handle_t others[2] = {v[0], v[2]};
    CHILD_CHECK(GNI_CqVectorMonitor(others, 2, 10, &which) == GNI_RC_TIMEOUT);
    CHILD_CHECK(GNI_CqInterruptUnmask(v[1]) == GNI_RC_SUCCESS);
    CHILD_CHECK(GNI_CqVectorMonitor(v, 3, 10, &which) == GNI_RC_NOT_DONE);  // still masked once
    CHILD_CHECK(GNI_CqInterruptUnmask(v[1]) == GNI_RC_SUCCESS);
    CHILD_CHECK(GNI_CqInterruptUnmask(v[1]) == GNI_RC_NOT_DONE);
    CHILD_CHECK(GNI_CqVectorMonitor(v, 3, 10, &which) == GNI_RC_TIMEOUT);
    // Taking a mask wakes a monitor that sleeps on that CQ.
    {
      std::atomic<int> rc{-1};
      std::thread th([&] {
        uint32_t wh;
        rc = GNI_CqVectorMonitor(v, 3, 10000, &wh);
      });
      sleep_ms(100);
      t0 = now_ms();
      CHILD_CHECK(GNI_CqInterruptMask(v[0]) == GNI_RC_SUCCESS);
      th.join();
      CHILD_CHECK(rc == GNI_RC_NOT_DONE);
      CHILD_CHECK(now_ms() - t0 < 1000);
      CHILD_CHECK(GNI_CqInterruptUnmask(v[0]) == GNI_RC_SUCCESS);
    }
    oob.send(0, 4);
    return 0;
  });
  pid_t p = cl.spawn(0, [&] {
    Gni g = open_gni(2, c);
    Target tg = oob.recv<Target>(1);
    gni_ep_handle_t ep = bound_ep(g.nic, g.cq, tg.addr, tg.inst);
    CHILD_CHECK(oob.recv<int>(1) == 1);
    sleep_ms(100);  // let the waiter fall asleep
    cqwrite_silent(ep, tg.vec_h[2], 0x2222);
    CHILD_CHECK(oob.recv<int>(1) == 2);
    cqwrite_silent(ep, tg.vec_h[2], 0x2b);
    cqwrite_silent(ep, tg.vec_h[1], 0x1b);
    oob.send(1, 2);
    CHILD_CHECK(oob.recv<int>(1) == 3);
    sleep_ms(100);
    cqwrite_silent(ep, tg.vec_h[0], 0x3333);
    CHILD_CHECK(oob.recv<int>(1) == 4);
    return 0;
  });
  CHECK(cl.wait(w) == 0);
  CHECK(cl.wait(p) == 0);
}

TEST_CASE_FIXTURE(OneNode, "a progress thread monitors while other threads use the CQs; a CQ write to itself stops it") {
  pid_t p = cl.spawn(0, [&] {
    // Open MPI's pattern: the progress thread runs GNI_CqVectorMonitor unlocked and then
    // progresses under the client's lock, as the main thread does; shutdown is a CQ write
    // from the process to itself. This also exercises a process reaching its own address.
    Gni g = open_gni(4, c);
    static char irq[64], data[4096], src[4096], back[4096];
    gni_mem_handle_t irq_h = reg(g, irq, sizeof irq, g.rcq);
    gni_mem_handle_t data_h = reg(g, data, sizeof data, g.rcq);
    gni_mem_handle_t back_h = reg(g, back, sizeof back, nullptr);
    gni_ep_handle_t ep = bound_ep(g.nic, g.cq, g.addr, 4);  // our own NIC address and instance
    CHILD_CHECK(GNI_EpSetEventData(ep, 4, 40) == GNI_RC_SUCCESS);

    std::mutex lock;  // the client's device lock
    std::atomic<bool> stop{false};
    std::atomic<int> cq_writes{0}, remote_puts{0}, local_done{0}, wakeups{0};
    std::atomic<bool> bad{false}, running{false};
    auto progress = [&] {  // drain both CQs; the caller holds `lock`
      gni_cq_entry_t e;
      while (GNI_CqGetEvent(g.rcq, &e) == GNI_RC_SUCCESS) {
        if (GNI_CQ_GET_DATA(e) == 0xdead) continue;
        if (GNI_CQ_GET_REM_INST_ID(e) == 40)
          ++remote_puts;  // a PUT's remote event carries our remote_event
        else if (GNI_CQ_GET_DATA(e) >= 1000 && GNI_CQ_GET_DATA(e) < 2000)
          ++cq_writes;
        else
          bad = true;
      }
      while (GNI_CqGetEvent(g.cq, &e) == GNI_RC_SUCCESS) {
        gni_post_descriptor_t* out = nullptr;
        if (GNI_GetCompleted(g.cq, e, &out) != GNI_RC_SUCCESS || !out) bad = true;
        ++local_done;
        delete out;
      }
    };
    std::thread th([&] {
      gni_cq_handle_t vec[2] = {g.rcq, g.cq};
      running = true;
      while (!stop) {
        uint32_t which;
        gni_return_t rc = GNI_CqVectorMonitor(vec, 2, uint64_t(-1), &which);
        if (rc == GNI_RC_NOT_DONE) continue;
        if (rc == GNI_RC_SUCCESS && !stop) {
          ++wakeups;
          std::lock_guard<std::mutex> lk(lock);
          progress();
        }
      }
    });
    while (!running) sleep_ms(1);
    // Both threads progress while the main thread posts PUTs and CQ writes to itself.
    constexpr int kRounds = 200;
    for (int i = 0; i < kRounds; ++i) {
      std::lock_guard<std::mutex> lk(lock);
      std::memset(src, 'a' + i % 26, 64);
      auto* d = new gni_post_descriptor_t(put_desc(uint64_t(src), uint64_t(data) + 64 * (i % 64), data_h, 64));
      d->cq_mode = GNI_CQMODE_GLOBAL_EVENT | GNI_CQMODE_REMOTE_EVENT;
      CHILD_CHECK(GNI_PostFma(ep, d) == GNI_RC_SUCCESS);
      auto* w = new gni_post_descriptor_t(cqw_desc(irq_h, 1000 + uint64_t(i)));
      CHILD_CHECK(GNI_PostCqWrite(ep, w) == GNI_RC_SUCCESS);
      if (i % 8 == 0) progress();  // the main thread progresses too
    }
    // What is left is the progress thread's: the monitor sees it without being told.
    uint64_t t0 = now_ms();
    while ((cq_writes < kRounds || remote_puts < kRounds || local_done < 2 * kRounds) && now_ms() - t0 < 5000)
      sleep_ms(1);
    CHILD_CHECK(cq_writes == kRounds && remote_puts == kRounds && local_done == 2 * kRounds);
    // One write at a time: each one wakes the sleeping monitor.
    for (int i = 0; i < 10; ++i) {
      const int seen = cq_writes;
      const int woken = wakeups;
      sleep_ms(2);  // the monitor is asleep by now
      {
        std::lock_guard<std::mutex> lk(lock);
        auto* w = new gni_post_descriptor_t(cqw_desc(irq_h, 1500 + uint64_t(i)));
        CHILD_CHECK(GNI_PostCqWrite(ep, w) == GNI_RC_SUCCESS);
      }
      t0 = now_ms();
      while ((cq_writes == seen || local_done < 2 * kRounds + i + 1) && now_ms() - t0 < 5000) sleep_ms(1);
      CHILD_CHECK(cq_writes == seen + 1 && wakeups > woken);
    }
    CHILD_CHECK(!bad);
    {
      std::lock_guard<std::mutex> lk(lock);
      stop = true;  // from here on the main thread owns the CQs again
    }
    // Stop the progress thread the Open MPI way: a CQ write to ourselves wakes it.
    {
      gni_post_descriptor_t kill = cqw_desc(irq_h, 0xdead, GNI_CQMODE_SILENT);
      CHILD_CHECK(GNI_PostCqWrite(ep, &kill) == GNI_RC_SUCCESS);
    }
    th.join();
    // What the PUTs to ourselves left, read back with a GET from ourselves.
    gni_post_descriptor_t gd = put_desc(uint64_t(back), uint64_t(data), data_h, 4096);
    gd.type = GNI_POST_FMA_GET;
    gd.local_mem_hndl = back_h;
    CHILD_CHECK(GNI_PostFma(ep, &gd) == GNI_RC_SUCCESS);
    CHILD_CHECK(wait_completion(g.cq, gd, 5000) == 0);
    CHILD_CHECK(std::memcmp(back, data, sizeof data) == 0);
    for (int slot = 0; slot < 64; ++slot) {
      int last = slot;  // the last round that wrote this slot
      while (last + 64 < kRounds) last += 64;
      CHILD_CHECK(back[64 * slot] == char('a' + last % 26) && back[64 * slot + 63] == char('a' + last % 26));
    }
    return 0;
  });
  CHECK(cl.wait(p) == 0);
}

TEST_CASE("a vector of more CQs than one futex_waitv takes still wakes (the polling fallback)") {
  CHECK(in_one_child(1, 30, [&](Cluster&, Cred, Gni& g) {
    constexpr uint32_t kCqs = 130;
    std::vector<gni_cq_handle_t> v(kCqs);
    for (auto& q : v) CHILD_CHECK(GNI_CqCreate(g.nic, 16, 0, GNI_CQ_BLOCKING, nullptr, nullptr, &q) == GNI_RC_SUCCESS);
    static char buf[64];
    gni_mem_handle_t h = reg(g, buf, sizeof buf, v[kCqs - 1]);
    gni_ep_handle_t ep = bound_ep(g.nic, g.cq, g.addr, 1);
    gni_cq_entry_t e;
    uint32_t which = 0;
    CHILD_CHECK(GNI_CqVectorWaitEvent(v.data(), kCqs, 20, &e, &which) == GNI_RC_TIMEOUT);
    std::thread th([&] {
      sleep_ms(50);
      cqwrite_silent(ep, h, 0x130);
    });
    uint64_t t0 = now_ms();
    CHILD_CHECK(GNI_CqVectorMonitor(v.data(), kCqs, 5000, &which) == GNI_RC_SUCCESS && which == kCqs - 1);
    CHILD_CHECK(now_ms() - t0 < 1000);
    th.join();
    CHILD_CHECK(GNI_CqVectorWaitEvent(v.data(), kCqs, 1000, &e, &which) == GNI_RC_SUCCESS && which == kCqs - 1);
    CHILD_CHECK(GNI_CQ_GET_DATA(e) == 0x130);
    return 0;
  }) == 0);
}

TEST_CASE_FIXTURE(OneNode, "daemon SIGKILL: a blocked vector wait and a blocked monitor notice") {
  pid_t p = cl.spawn(0, [&] {
    Gni g = open_gni(1, c);
    gni_cq_handle_t vec[2] = {g.cq, g.rcq};
    std::atomic<int> mon_rc{-1};
    std::thread th([&] {
      uint32_t which;
      mon_rc = GNI_CqVectorMonitor(vec, 2, uint64_t(-1), &which);
    });
    oob.send(0, 1);
    gni_cq_entry_t e;
    uint32_t which;
    CHILD_CHECK(GNI_CqVectorWaitEvent(vec, 2, uint64_t(-1), &e, &which) == GNI_RC_TRANSACTION_ERROR);
    CHILD_CHECK(GNI_CQ_GET_STATUS(e) == cqe::kErrNicDown);
    th.join();
    // The monitor reports the CQ whose next GNI_CqGetEvent returns the error.
    CHILD_CHECK(mon_rc == GNI_RC_SUCCESS);
    return 0;
  });
  CHECK(oob.recv<int>(1) == 1);
  sleep_ms(100);  // let both block
  kill(cl.daemon_pid(0), SIGKILL);
  CHECK(cl.wait(p, 10) == 0);
}

namespace {

// A mailbox area registered with the remote-event CQ, as clients set it up.
struct Mailbox {
  std::vector<char> mem;
  gni_smsg_attr_t attr{};
  void init(Gni& g, uint16_t credits) {
    attr.msg_type = GNI_SMSG_TYPE_MBOX_AUTO_RETRANSMIT;
    attr.mbox_maxcredit = credits;
    attr.msg_maxsize = 128;
    unsigned size = 0;
    CHILD_CHECK(GNI_SmsgBufferSizeNeeded(&attr, &size) == GNI_RC_SUCCESS);
    mem.assign(size, 0);
    attr.msg_buffer = mem.data();
    attr.buff_size = size;
    attr.mbox_offset = 0;
    attr.mem_hndl = reg(g, mem.data(), size, g.rcq);
  }
};

uint32_t stat(Gni& g, gni_statistic_t s) {
  uint32_t v = 0xFFFFFFFF;
  CHILD_CHECK(GNI_GetNicStat(g.nic, s, &v) == GNI_RC_SUCCESS);
  return v;
}

}  // namespace

TEST_CASE_FIXTURE(OneNode, "two CDMs in one process talk to each other: FMA, SMSG, CQ writes; per-NIC statistics") {
  pid_t p = cl.spawn(0, [&] {
    Gni a, b;  // same ptag/cookie, different inst_id, as UCX's gtest sets both ends up
    CHILD_CHECK(a.open(1, c) == GNI_RC_SUCCESS);
    CHILD_CHECK(b.open(2, c) == GNI_RC_SUCCESS);
    CHILD_CHECK(a.addr == b.addr && a.addr == cl.addr(0));
    for (int s = 0; s < GNI_NUM_STATS; ++s) {
      CHILD_CHECK(GNI_ResetNicStat(a.nic, gni_statistic_t(s)) == GNI_RC_SUCCESS);
      CHILD_CHECK(GNI_ResetNicStat(b.nic, gni_statistic_t(s)) == GNI_RC_SUCCESS);
    }
    gni_ep_handle_t ab = bound_ep(a.nic, a.cq, b.addr, 2), ba = bound_ep(b.nic, b.cq, a.addr, 1);
    static char a_buf[4096], b_buf[4096], a_irq[64], b_irq[64];
    gni_mem_handle_t a_buf_h = reg(a, a_buf, sizeof a_buf, nullptr);
    gni_mem_handle_t b_buf_h = reg(b, b_buf, sizeof b_buf, b.rcq);
    gni_mem_handle_t a_irq_h = reg(a, a_irq, sizeof a_irq, a.rcq);
    gni_mem_handle_t b_irq_h = reg(b, b_irq, sizeof b_irq, b.rcq);

    // FMA PUT A -> B with a remote event, GET B's memory back into A.
    std::memset(a_buf, 'A', 512);
    gni_post_descriptor_t d = put_desc(uint64_t(a_buf), uint64_t(b_buf), b_buf_h, 512);
    d.cq_mode = GNI_CQMODE_GLOBAL_EVENT | GNI_CQMODE_REMOTE_EVENT;
    CHILD_CHECK(GNI_PostFma(ab, &d) == GNI_RC_SUCCESS);
    CHILD_CHECK(wait_completion(a.cq, d, 5000) == 0);
    for (int k = 0; k < 512; ++k) CHILD_CHECK(b_buf[k] == 'A');
    gni_cq_entry_t e;
    CHILD_CHECK(GNI_CqWaitEvent(b.rcq, 1000, &e) == GNI_RC_SUCCESS && GNI_CQ_GET_REM_INST_ID(e) == 1);
    std::memset(b_buf + 1024, 'B', 256);
    d = put_desc(uint64_t(a_buf + 2048), uint64_t(b_buf + 1024), b_buf_h, 256);
    d.type = GNI_POST_FMA_GET;
    d.local_mem_hndl = a_buf_h;
    CHILD_CHECK(GNI_PostFma(ab, &d) == GNI_RC_SUCCESS);
    CHILD_CHECK(wait_completion(a.cq, d, 5000) == 0);
    for (int k = 0; k < 256; ++k) CHILD_CHECK(a_buf[2048 + k] == 'B');

    // SMSG both ways.
    Mailbox am, bm;
    am.init(a, 4);
    bm.init(b, 4);
    CHILD_CHECK(GNI_SmsgInit(ab, &am.attr, &bm.attr) == GNI_RC_SUCCESS);
    CHILD_CHECK(GNI_SmsgInit(ba, &bm.attr, &am.attr) == GNI_RC_SUCCESS);
    uint64_t hdr = 0x1234;
    CHILD_CHECK(GNI_SmsgSendWTag(ab, &hdr, sizeof hdr, nullptr, 0, 77, 9) == GNI_RC_SUCCESS);
    CHILD_CHECK(GNI_CqWaitEvent(b.rcq, 1000, &e) == GNI_RC_SUCCESS && GNI_CQ_GET_TYPE(e) == GNI_CQ_EVENT_TYPE_SMSG);
    CHILD_CHECK(GNI_CQ_GET_INST_ID(e) == 1);
    void* msg = nullptr;
    uint8_t tag = GNI_SMSG_ANY_TAG;
    CHILD_CHECK(GNI_SmsgGetNextWTag(ba, &msg, &tag) == GNI_RC_SUCCESS && tag == 9);
    CHILD_CHECK(std::memcmp(msg, &hdr, sizeof hdr) == 0);
    CHILD_CHECK(GNI_SmsgRelease(ba) == GNI_RC_SUCCESS);
    hdr = 0x5678;
    CHILD_CHECK(GNI_SmsgSend(ba, &hdr, sizeof hdr, nullptr, 0, 78) == GNI_RC_SUCCESS);
    CHILD_CHECK(GNI_CqWaitEvent(a.rcq, 1000, &e) == GNI_RC_SUCCESS && GNI_CQ_GET_INST_ID(e) == 2);
    CHILD_CHECK(GNI_SmsgGetNext(ab, &msg) == GNI_RC_SUCCESS && std::memcmp(msg, &hdr, sizeof hdr) == 0);
    CHILD_CHECK(GNI_SmsgRelease(ab) == GNI_RC_SUCCESS);
    // Local SMSG events of both sends.
    CHILD_CHECK(GNI_CqWaitEvent(a.cq, 1000, &e) == GNI_RC_SUCCESS && GNI_CQ_GET_MSG_ID(e) == 77);
    CHILD_CHECK(GNI_CqWaitEvent(b.cq, 1000, &e) == GNI_RC_SUCCESS && GNI_CQ_GET_MSG_ID(e) == 78);

    // CQ writes both ways.
    CHILD_CHECK(cqwrite(ab, a.cq, b_irq_h, 0xB0B) == 0);
    CHILD_CHECK(GNI_CqWaitEvent(b.rcq, 1000, &e) == GNI_RC_SUCCESS && GNI_CQ_GET_DATA(e) == 0xB0B);
    CHILD_CHECK(cqwrite(ba, b.cq, a_irq_h, 0xA0A) == 0);
    CHILD_CHECK(GNI_CqWaitEvent(a.rcq, 1000, &e) == GNI_RC_SUCCESS && GNI_CQ_GET_DATA(e) == 0xA0A);

    // Statistics are per NIC: A launched 2 FMA posts, 1 SMSG and 1 CQ write; B 1 and 1.
    CHILD_CHECK(stat(a, GNI_STAT_FMA_LAUNCH_COUNT) == 4);
    CHILD_CHECK(stat(b, GNI_STAT_FMA_LAUNCH_COUNT) == 2);
    // Fill A's credits towards B: one stall per refused send.
    for (int k = 0; k < 4; ++k) CHILD_CHECK(GNI_SmsgSend(ab, &hdr, sizeof hdr, nullptr, 0, 0) == GNI_RC_SUCCESS);
    CHILD_CHECK(GNI_SmsgSend(ab, &hdr, sizeof hdr, nullptr, 0, 0) == GNI_RC_NOT_DONE);
    CHILD_CHECK(GNI_SmsgSend(ab, &hdr, sizeof hdr, nullptr, 0, 0) == GNI_RC_NOT_DONE);
    CHILD_CHECK(stat(a, GNI_STAT_SMSG_MBOX_CREDITS_STALL) == 2);
    CHILD_CHECK(stat(a, GNI_STAT_FMA_LAUNCH_COUNT) == 8);
    CHILD_CHECK(stat(b, GNI_STAT_SMSG_MBOX_CREDITS_STALL) == 0);
    // What nicemu has no equivalent for stays 0 (docs/decisions.md).
    for (int s = 0; s < GNI_NUM_STATS; ++s) {
      if (s == GNI_STAT_FMA_LAUNCH_COUNT || s == GNI_STAT_SMSG_MBOX_CREDITS_STALL) continue;
      CHILD_CHECK(stat(a, gni_statistic_t(s)) == 0);
    }
    CHILD_CHECK(GNI_ResetNicStat(a.nic, GNI_STAT_FMA_LAUNCH_COUNT) == GNI_RC_SUCCESS);
    CHILD_CHECK(stat(a, GNI_STAT_FMA_LAUNCH_COUNT) == 0);
    uint32_t v;
    CHILD_CHECK(GNI_GetNicStat(a.nic, gni_statistic_t(GNI_NUM_STATS), &v) == GNI_RC_INVALID_PARAM);
    CHILD_CHECK(GNI_GetNicStat(nullptr, GNI_STAT_FMA_LAUNCH_COUNT, &v) == GNI_RC_INVALID_PARAM);
    CHILD_CHECK(GNI_EpDestroy(ab) == GNI_RC_SUCCESS && GNI_EpDestroy(ba) == GNI_RC_SUCCESS);
    CHILD_CHECK(GNI_CdmDestroy(b.cdm) == GNI_RC_SUCCESS);
    CHILD_CHECK(GNI_CdmDestroy(a.cdm) == GNI_RC_SUCCESS);
    return 0;
  });
  CHECK(cl.wait(p) == 0);
}

TEST_CASE("queries: registrations, handle attributes, device resources, delivery mode, error subscriptions") {
  CHECK(in_one_child(1, 30, [&](Cluster&, Cred, Gni& g) {
    gni_dev_res_desc_t mdd0{}, mdd{}, cqs{};
    CHILD_CHECK(GNI_GetDevResInfo(0, GNI_DEV_RES_MDD, &mdd0) == GNI_RC_SUCCESS);

    // Registrations: iterate the live ones, in slot order, with their original handles.
    static char a[8192], b[4096], d[4096];
    gni_mem_handle_t ha = reg(g, a + 100, 5000, g.rcq);
    gni_mem_handle_t hb = reg(g, b, sizeof b, nullptr, GNI_MEM_READ_ONLY);
    gni_mem_handle_t hd = reg(g, d, sizeof d, nullptr);
    gni_mem_handle_t hd_dead = hd;
    CHILD_CHECK(GNI_MemDeregister(g.nic, &hd) == GNI_RC_SUCCESS);
    gni_mem_handle_t it{};
    uint64_t addr = 1, len = 1;
    CHILD_CHECK(GNI_MemQueryHndls(g.nic, -1, &it, &addr, &len) == GNI_RC_SUCCESS);
    CHILD_CHECK(std::memcmp(&it, &ha, sizeof it) == 0 && addr == uint64_t(a + 100) && len == 5000);
    CHILD_CHECK(GNI_MemQueryHndls(g.nic, -1, &it, &addr, &len) == GNI_RC_SUCCESS);
    CHILD_CHECK(std::memcmp(&it, &hb, sizeof it) == 0 && addr == uint64_t(b) && len == sizeof b);
    CHILD_CHECK(GNI_MemQueryHndls(g.nic, -1, &it, &addr, &len) == GNI_RC_NO_MATCH);
    CHILD_CHECK(addr == 0 && len == 0);
    it = hd_dead;
    CHILD_CHECK(GNI_MemQueryHndls(g.nic, -1, &it, &addr, &len) == GNI_RC_INVALID_STATE);
    it.qword1 = 0x1234;
    it.qword2 = 0x5678;
    CHILD_CHECK(GNI_MemQueryHndls(g.nic, -1, &it, &addr, &len) == GNI_RC_INVALID_STATE);
    CHILD_CHECK(GNI_MemQueryHndls(nullptr, -1, &it, &addr, &len) == GNI_RC_INVALID_PARAM);
    CHILD_CHECK(GNI_MemQueryHndls(g.nic, -1, nullptr, &addr, &len) == GNI_RC_INVALID_PARAM);

    // Handle attributes.
    int yes = -1;
    CHILD_CHECK(GNI_MemHndlQueryAttr(&hb, GNI_MEMHNDL_ATTR_READONLY, &yes) == GNI_RC_SUCCESS && yes == 1);
    CHILD_CHECK(GNI_MemHndlQueryAttr(&ha, GNI_MEMHNDL_ATTR_READONLY, &yes) == GNI_RC_SUCCESS && yes == 0);
    CHILD_CHECK(GNI_MemHndlQueryAttr(&ha, GNI_MEMHNDL_ATTR_VMDH, &yes) == GNI_RC_SUCCESS && yes == 0);
    CHILD_CHECK(GNI_MemHndlQueryAttr(&ha, GNI_MEMHNDL_ATTR_CLONE, &yes) == GNI_RC_SUCCESS && yes == 0);
    CHILD_CHECK(GNI_MemHndlQueryAttr(&ha, gni_mem_handle_attr_t(0), &yes) == GNI_RC_INVALID_PARAM);
    CHILD_CHECK(GNI_MemHndlQueryAttr(&ha, gni_mem_handle_attr_t(8), &yes) == GNI_RC_INVALID_PARAM);
    gni_mem_handle_t bad = hb;
    bad.qword2 ^= 1;  // breaks the CRC
    CHILD_CHECK(GNI_MemHndlQueryAttr(&bad, GNI_MEMHNDL_ATTR_READONLY, &yes) == GNI_RC_INVALID_PARAM);
    CHILD_CHECK(GNI_MemHndlQueryAttr(nullptr, GNI_MEMHNDL_ATTR_READONLY, &yes) == GNI_RC_INVALID_PARAM);

    // Segments: one registration addressed by offset (its data path: test_segments.cpp),
    // listed as the offset space [0, total).
    gni_mem_segment_t seg[2] = {{uint64_t(d) + 2048, 2048}, {uint64_t(d), 2000}};
    gni_mem_handle_t hs{};
    seg[1].length = 0;
    CHILD_CHECK(GNI_MemRegisterSegments(g.nic, seg, 2, nullptr, 0, uint32_t(-1), &hs) == GNI_RC_INVALID_PARAM);
    CHILD_CHECK(GNI_MemRegisterSegments(g.nic, seg, 0, nullptr, 0, uint32_t(-1), &hs) == GNI_RC_INVALID_PARAM);
    seg[1].length = 2000;
    CHILD_CHECK(GNI_MemRegisterSegments(g.nic, seg, 2, nullptr, 0, uint32_t(-1), &hs) == GNI_RC_SUCCESS);
    it = hb;
    CHILD_CHECK(GNI_MemQueryHndls(g.nic, -1, &it, &addr, &len) == GNI_RC_SUCCESS);
    CHILD_CHECK(std::memcmp(&it, &hs, sizeof it) == 0 && addr == 0 && len == 4048);

    // Device resources: per-CDM limits, this process's usage.
    CHILD_CHECK(GNI_GetDevResInfo(0, GNI_DEV_RES_MDD, &mdd) == GNI_RC_SUCCESS);
    CHILD_CHECK(mdd.total == 16384 && mdd.held == mdd0.held + 3 && mdd.available == mdd.total - mdd.held);
    CHILD_CHECK(GNI_GetDevResInfo(0, GNI_DEV_RES_CQ, &cqs) == GNI_RC_SUCCESS);
    CHILD_CHECK(cqs.total == 1024 && cqs.held == 2 && cqs.reserved == 0);
    CHILD_CHECK(GNI_GetDevResInfo(0, GNI_DEV_RES_FMA, &cqs) == GNI_RC_ILLEGAL_OP);
    CHILD_CHECK(GNI_GetDevResInfo(0, gni_dev_res_t(0), &cqs) == GNI_RC_INVALID_PARAM);
    CHILD_CHECK(GNI_GetDevResInfo(1, GNI_DEV_RES_MDD, &cqs) == GNI_RC_INVALID_PARAM);
    CHILD_CHECK(GNI_GetDevResInfo(0, GNI_DEV_RES_MDD, nullptr) == GNI_RC_INVALID_PARAM);
    CHILD_CHECK(GNI_SetMddResources(g.nic, 64) == GNI_RC_SUCCESS);
    CHILD_CHECK(GNI_SetMddResources(nullptr, 64) == GNI_RC_INVALID_PARAM);

    // SMSG delivery mode: known bits are accepted.
    CHILD_CHECK(GNI_SmsgSetDeliveryMode(g.nic, GNI_DLVMODE_IN_ORDER) == GNI_RC_SUCCESS);
    CHILD_CHECK(GNI_SmsgSetDeliveryMode(g.nic, GNI_DLVMODE_ADAPTIVE3 | GNI_DLVMODE_ORDERED_TAIL) == GNI_RC_SUCCESS);
    CHILD_CHECK(GNI_SmsgSetDeliveryMode(g.nic, 0x8000) == GNI_RC_INVALID_PARAM);
    CHILD_CHECK(GNI_SmsgSetDeliveryMode(nullptr, GNI_DLVMODE_PERFORMANCE) == GNI_RC_INVALID_PARAM);

    // Error subscription: a working object; nicemu raises no events.
    gni_err_handle_t eh = nullptr;
    const gni_error_mask_t m = GNI_ERRMASK_TRANSACTION | GNI_ERRMASK_CRITICAL;
    CHILD_CHECK(GNI_SubscribeErrors(g.nic, 1, m, 64, &eh) == GNI_RC_NO_MATCH);
    CHILD_CHECK(GNI_SubscribeErrors(g.nic, 0, m, 0, &eh) == GNI_RC_INVALID_PARAM);
    CHILD_CHECK(GNI_SubscribeErrors(nullptr, 0, m, 64, &eh) == GNI_RC_INVALID_PARAM);
    CHILD_CHECK(GNI_SubscribeErrors(g.nic, 0, m, 64, &eh) == GNI_RC_SUCCESS);
    gni_error_mask_t got = 0, old = 0;
    CHILD_CHECK(GNI_GetErrorMask(eh, &got) == GNI_RC_SUCCESS && got == m);
    CHILD_CHECK(GNI_SetErrorMask(eh, GNI_ERRMASK_TRANSIENT, &old) == GNI_RC_SUCCESS && old == m);
    CHILD_CHECK(GNI_GetErrorMask(eh, &got) == GNI_RC_SUCCESS && got == GNI_ERRMASK_TRANSIENT);
    gni_error_event_t ev[4];
    uint32_t n = 99;
    CHILD_CHECK(GNI_GetErrorEvent(eh, ev) == GNI_RC_NOT_DONE);
    CHILD_CHECK(GNI_WaitErrorEvents(eh, ev, 4, 0, &n) == GNI_RC_NOT_DONE && n == 0);
    uint64_t t0 = now_ms();
    CHILD_CHECK(GNI_WaitErrorEvents(eh, ev, 4, 50, &n) == GNI_RC_TIMEOUT && n == 0);
    CHILD_CHECK(now_ms() - t0 >= 50);
    CHILD_CHECK(GNI_WaitErrorEvents(eh, ev, 0, 50, &n) == GNI_RC_INVALID_PARAM);
    CHILD_CHECK(GNI_SetErrorPtag(eh, 5) == GNI_RC_PERMISSION_ERROR);
    CHILD_CHECK(GNI_GetErrorEvent(nullptr, ev) == GNI_RC_INVALID_PARAM);
    // Releasing the subscription wakes a thread that waits forever on it.
    std::atomic<int> wrc{-1};
    std::thread th([&] {
      gni_error_event_t e2[1];
      uint32_t n2;
      wrc = GNI_WaitErrorEvents(eh, e2, 1, uint32_t(-1), &n2);
    });
    sleep_ms(50);
    CHILD_CHECK(GNI_ReleaseErrors(eh) == GNI_RC_SUCCESS);
    th.join();
    CHILD_CHECK(wrc == GNI_RC_NOT_DONE);
    CHILD_CHECK(GNI_ReleaseErrors(nullptr) == GNI_RC_INVALID_PARAM);
    return 0;
  }) == 0);
}

TEST_CASE("device type: a daemon started with --device gemini reports GNI_DEVICE_GEMINI") {
  Cluster cl(1, {"--device", "gemini"});
  Cred c = cl.credential();
  pid_t p = cl.spawn(0, [&] {
    gni_nic_device_t dt = GNI_DEVICE_ARIES;
    CHILD_CHECK(GNI_GetDeviceType(&dt) == GNI_RC_SUCCESS && dt == GNI_DEVICE_GEMINI);
    Gni g = open_gni(1, c);
    // Gemini's rule for GETs: the local address must be 4-byte aligned too.
    static char buf[256] __attribute__((aligned(8)));
    gni_mem_handle_t h = reg(g, buf, sizeof buf, nullptr);
    gni_ep_handle_t ep = bound_ep(g.nic, g.cq, g.addr, 1);
    gni_post_descriptor_t d = put_desc(uint64_t(buf + 2), uint64_t(buf + 128), h, 8);
    d.type = GNI_POST_FMA_GET;
    d.local_mem_hndl = h;
    CHILD_CHECK(GNI_PostFma(ep, &d) == GNI_RC_ALIGNMENT_ERROR);
    d.local_addr = uint64_t(buf + 4);
    CHILD_CHECK(GNI_PostFma(ep, &d) == GNI_RC_SUCCESS);
    CHILD_CHECK(wait_completion(g.cq, d, 5000) == 0);
    return 0;
  });
  CHECK(cl.wait(p) == 0);
}

// One thread registers and deregisters memory over and over while another PUTs into its own
// registered buffer through a bound EP and checks every byte: the registration table's
// writer and the post path's reader (its seqlock) in one process, which tools/tsan-integration
// runs under ThreadSanitizer.
TEST_CASE("a thread registers and deregisters while another PUTs to its own memory") {
  CHECK(in_one_child(1, 60, [&](Cluster&, Cred, Gni& g) {
    static char src[256], dst[256], churn[64][64];
    gni_mem_handle_t h = mem_register(g.nic, uint64_t(dst), sizeof dst);
    gni_ep_handle_t ep = bound_ep(g.nic, g.cq, g.addr, g.inst);
    std::atomic<bool> stop{false};
    std::atomic<int> bad{0};
    std::thread reg([&] {
      while (!stop.load()) {
        gni_mem_handle_t hs[64];
        for (int i = 0; i < 64; ++i)
          if (GNI_MemRegister(g.nic, uint64_t(churn[i]), sizeof churn[i], nullptr, 0, uint32_t(-1), &hs[i]) !=
              GNI_RC_SUCCESS)
            bad.fetch_add(1);
        for (auto& x : hs)
          if (GNI_MemDeregister(g.nic, &x) != GNI_RC_SUCCESS) bad.fetch_add(1);
      }
    });
    for (int round = 0; round < 200; ++round) {
      std::memset(src, round & 0xFF, sizeof src);
      gni_post_descriptor_t d = put_desc(uint64_t(src), uint64_t(dst), h, sizeof src);
      if (post_and_wait(g.cq, ep, d) != 0 || std::memcmp(src, dst, sizeof dst) != 0) bad.fetch_add(1);
    }
    stop.store(true);
    reg.join();
    CHILD_CHECK(bad.load() == 0);
    return 0;
  }) == 0);
}
