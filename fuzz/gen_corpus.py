#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets (fuzz/corpus/TARGET/): a few small valid
inputs each, laid out as the harnesses in fuzz/*.cpp read them. Run from anywhere; the
output is deterministic, so re-running it changes nothing unless this file changed."""
import os
import re
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
FUZZ_PID = 0x7FFFFFF0  # ctl_node.cpp's kFuzzPid
KNOCQ = 0xFFFFFFFF


def header_constant(path, name):
    """`inline constexpr ... NAME = N;` of a header: seeds go stale with a version bump otherwise."""
    with open(os.path.join(HERE, "..", path)) as f:
        m = re.search(r"\b" + name + r"\s*=\s*(\d+)\s*;", f.read())
    if not m:
        raise SystemExit(f"{name} not found in {path}")
    return int(m.group(1))


CTL_MAGIC = 0x4E43544C
CTL_VERSION = header_constant("nicemu/abi/ctl_header.h", "kVersion")
ABI_VERSION = header_constant("nicemu/abi/shm_layout.h", "kAbiVersion")


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# --- ctl_node: control messages (nicemu/abi/ctl_protocol.h) --------------------------------
def msg(op, body=b"", seq=1):
    return struct.pack("<IHHII", CTL_MAGIC, CTL_VERSION, op, seq, 16 + len(body)) + body


def attach(inst=0, ptag=10, cookie=0x1234):
    return msg(2, struct.pack("<IIIIIHH", inst, ptag, cookie, 0, FUZZ_PID, ABI_VERSION, 0))


def drc(action, id_=0, kind=0, value=0, ptag=0, cookie=0, flags=0):
    return msg(100, struct.pack("<8I", action, id_, kind, value, ptag, cookie, flags, 0))


hello = msg(1)
status = msg(11, struct.pack("<II", 0, 0))
mem_register = msg(3, struct.pack("<QQIIIIQQ", 0x10000000, 65536, 0, KNOCQ, 0, 0, 0, 0))
mem_register_segs = msg(60, struct.pack("<IIIIII", 0, KNOCQ, 2, 0, 0, 0) +
                        struct.pack("<QQ", 0x10000000, 8192) + struct.pack("<QQ", 0x20000000, 4096))
cq_create = msg(5, struct.pack("<II", 64, 0))
cq_destroy = msg(6, struct.pack("<II", 0, 0))
cred_issue = msg(9, bytes(24))  # uid 0: refused unless the fuzzer runs as root; parsed either way
dgram_open = msg(27)
bi_get = msg(62)
fault_get = msg(64)
msgq_join = msg(50, struct.pack("<8I", 128, 1, 1, 2, 8, 0, 16, 0))
write("ctl_node", "hello", hello)
write("ctl_node", "status", status)
write("ctl_node", "attach", attach())
write("ctl_node", "attach_register", attach() + mem_register + mem_register_segs)
write("ctl_node", "attach_cq", attach() + cq_create + cq_destroy)
write("ctl_node", "attach_dgram", attach() + dgram_open)
write("ctl_node", "getters", hello + bi_get + fault_get + cred_issue)
write("ctl_node", "attach_msgq", attach() + msgq_join)
# DRC (libdrc): acquire a chosen credential, grant it to uid 1, check access, release it.
write("ctl_node", "drc", drc(1, 7, ptag=20, cookie=0x00800001) + drc(2, 7, kind=1, value=1) + drc(4, 7) +
      drc(6, cookie=0x00800001) + drc(5, 7))

# --- packet: mode byte, then [u16 length][packet without MAC] (nicemu/abi/wire_protocol.h) --
WIRE_MAGIC, WIRE_VERSION = 0x4E464142, 6


def packet(records, ack=0, base=0, sack=0, src=1, dst=0, flags=0, pn=1):
    body = b"".join(struct.pack("<IHBB", seq, len(p), typ, fl) + p for seq, typ, fl, p in records)
    total = 64 + len(body) + 16
    # mac_alg 0: the harness's seal writes its own; pn: the packet number (AEAD nonce)
    hdr = struct.pack("<IBBHIIQQIIQHBBIQ", WIRE_MAGIC, WIRE_VERSION, flags, total, src, dst, 7, 0, ack, base, sack,
                      len(records), 0, 0, 0, pn)
    return hdr + body


def framed(*pkts, seal=1):
    return bytes([seal]) + b"".join(struct.pack("<H", len(p)) + p for p in pkts)


write("packet", "ack_only", framed(packet([], ack=1)))
write("packet", "one_record", framed(packet([(0, 1, 0, b"hello")])))
write("packet", "probe", framed(packet([(0, 2, 0, b"")])))
write("packet", "two_packets", framed(packet([(0, 1, 0, b"a" * 40)]), packet([(1, 1, 0, b"b" * 40)], ack=2, pn=2)))
# A selective-ack extension (record type 3, unsequenced) beside a data record.
write("packet", "sack_ext", framed(packet([(0, 1, 0, b"hello")]),
                                   packet([(0, 3, 0, bytes([0xF5] * 16)), (1, 1, 0, b"x")], ack=2, sack=0xFF, pn=2)))
write("packet", "unsealed", framed(packet([(0, 1, 0, b"x")]) + bytes(16), seal=0))

# --- region_access: see region_access.cpp for the layout ------------------------------------
def reg_entry(state=1, gen=5, flags=0, address=0x10000000, length=65536, dst_cq=KNOCQ, seg_count=0, seg_first=0):
    return struct.pack("<IIIIQQIIIIQQ", 0, state, gen, flags, address, length, dst_cq, seg_count, seg_first, 0, 0, 0)


def region_input(mode, slot, entry, addr, length, write_, segs=b""):
    return struct.pack("<BH", mode, slot) + entry + struct.pack("<QQB", addr, length, write_) + bytes(16) + segs


write("region_access", "plain_read", region_input(1, 3, reg_entry(), 0x10000100, 256, 0))
write("region_access", "plain_write_ro", region_input(1, 3, reg_entry(flags=1), 0x10000100, 256, 1))
write("region_access", "out_of_bounds", region_input(1, 7, reg_entry(), 0x1000FF00, 512, 0))
segs = struct.pack("<QQQQ", 0, 0x10000000, 8192, 0) + struct.pack("<QQQQ", 8192, 0x20000000, 4096, 0)
write("region_access", "segments", region_input(1, 9, reg_entry(address=0, length=12288, seg_count=2, seg_first=40),
                                                4000, 6000, 1, segs))
write("region_access", "forged_handle", region_input(0, 3, reg_entry(), 0x10000100, 256, 0))

# --- fault_spec: the text form (nicemu/fault/fault_spec.h) ----------------------------------
write("fault_spec", "off", "off")
write("fault_spec", "drops", "seed=42 smsg.drop=0.01 rdma_put.corrupt=0.001@3")
write("fault_spec", "nth", "nth=put:5:error,nth=smsg:2:drop")
write("fault_spec", "link", "link_down=*@100..250ms ordering=relaxed reorder=0.1 window=8 delay_us=10..200")
write("fault_spec", "tunables", "on retransmit_us=500 error_done=0.5 max_retrans=3 any.delay=0.2")

# --- fabric_map: TOML (nicemu/fabric/fabric_map.h) ------------------------------------------
write("fabric_map", "two_nodes", '[[node]]\nnic = 0\nhost = "10.0.0.1"\nport = 7700\n\n'
      '[[node]]\nnic = 1\nhost = "10.0.0.2"\nport = 7700\n')
write("fabric_map", "one_node", '# comment\n[[node]]\nnic = 5\nhost = "127.0.0.1"\nport = 9000\n')
write("fabric_map", "duplicate", '[[node]]\nnic = 0\nhost = "10.0.0.1"\nport = 7700\n'
      '[[node]]\nnic = 0\nhost = "10.0.0.1"\nport = 7701\n')
write("fabric_map", "empty", "")

# --- settings: the daemon's config file (nicemu/daemon/settings.h, nicemu --help-config) ----
write("settings", "basic", 'node = 3\nlog_level = "debug"\nregion_size_mb = 64\nbte_channels = 2\n')
write("settings", "limits", "allow_any_credential = true\nmax_cdms_per_process = 4\nmax_cqs_per_credential = 100\n")
write("settings", "fault", 'fault = "seed=1 smsg.drop=0.1"\ndevice = "aries"\n')
write("settings", "unknown_key", "no_such_setting = 1\n")

# --- relay_ring: an SMSG relay ring and relay blocks (fuzz/relay_ring.cpp) -------------------
def relay_records(*recs):
    out = b""
    for kind, payload, extra in recs:
        out += struct.pack("<BB", kind, len(payload)) + extra + payload
    return out


RELAYS = struct.pack("<B", 1) + struct.pack("<BH", 8, 256) + struct.pack("<BH", 2, 64)  # two relays
HONEST = relay_records((0, b"hello", b""), (1, b"abc", b""), (0, b"", b""), (0, b"x" * 200, b""))
write("relay_ring", "honest", b"\x00" + RELAYS + HONEST)
write("relay_ring", "over_credits", b"\x00" + RELAYS + relay_records(*[(1, b"m%d" % i, b"") for i in range(4)]))
for mut in range(1, 8):
    extra = struct.pack("<I", 7) if mut == 5 else b""
    write("relay_ring", f"mutation_{mut}", b"\x00" + RELAYS + relay_records((0, b"ok", b""), (mut << 3, b"bad", extra),
                                                                             (0, b"after", b"")))
write("relay_ring", "forged_tail", b"\x01" + RELAYS + HONEST + struct.pack("<Q", 0xFFFFFFFFFFFF0000))
write("relay_ring", "blocks", b"\x04" + RELAYS + HONEST + b"\xff" * 384)
write("relay_ring", "acks", b"\x08" + RELAYS + relay_records((1, b"a", b""), (1, b"b", b"")) +
      struct.pack("<III", 1, 1, 5) + struct.pack("<III", 2, 2, 6) + relay_records((1, b"c", b"")))

# --- smsg_mailbox: a relayed mailbox its receiver rewrites (fuzz/smsg_mailbox.cpp) -----------
def mb_send(payload, tag=1, op=0):
    return struct.pack("<BBB", op, len(payload), tag) + payload


write("smsg_mailbox", "honest", b"\x00" + mb_send(b"hello") + mb_send(b"world") + b"\x01\x03" + mb_send(b"!") +
      b"\x01\x01\x04\x03")
write("smsg_mailbox", "over_credits", b"\x00" + b"".join(mb_send(b"m%d" % i) for i in range(6)) + b"\x03\x01\x04\x03")
write("smsg_mailbox", "out_of_sequence", b"\x00" + mb_send(b"a") + mb_send(b"b", op=80) + mb_send(b"c", op=40) + b"\x03")
write("smsg_mailbox", "scribbled_ctl", b"\x01" + struct.pack("<IIIII", 0xFFFFFFF0, 7, 3, 1, 99) + mb_send(b"x") +
      b"\x01\x03\x04")
write("smsg_mailbox", "scribbled_slot", b"\x00" + mb_send(b"first") + b"\x02" + struct.pack("<HQ", 24, 0xFFFFFFFF) +
      b"\x01\x01" + mb_send(b"second") + b"\x03\x04")

# --- cq_ring: daemon pushes into rewritten CQ and datagram rings (fuzz/cq_ring.cpp) ----------
def cq_input(tail=0, head=0, overrun=0, waiters=0, futex=0, dtail=0, dhead=0, stalled=0, ops=b""):
    return (struct.pack("<QQIII", tail, head, overrun, waiters, futex) + b"\x00" * (64 * 8) +
            struct.pack("<QQI", dtail, dhead, stalled) + ops)


CQ_OPS = (b"\x00" + struct.pack("<Q", 0x1234) + bytes([1 | (7 << 2)]) + struct.pack("<8Q", *range(1, 9)) +
          b"\x02" + bytes(range(176)) + b"\x03" + struct.pack("<Q", 5) + b"\x00" + struct.pack("<Q", 77))
write("cq_ring", "honest", cq_input(ops=CQ_OPS))
write("cq_ring", "full", cq_input(tail=64, head=0, dtail=256, dhead=0, ops=CQ_OPS))
write("cq_ring", "wrapped", cq_input(tail=2**64 - 3, head=2**64 - 5, dtail=2**64 - 1, dhead=2**64 - 2, ops=CQ_OPS))
write("cq_ring", "backwards", cq_input(tail=5, head=900, waiters=1, dtail=3, dhead=10, stalled=1, ops=CQ_OPS))

# --- msgq_ring: the daemon on a scribbled MSGQ receive ring (fuzz/msgq_ring.cpp) -------------
def mq_deliver(hdr, msg, tag=1):
    return struct.pack("<BBB", 0, len(hdr), len(msg)) + hdr + msg + struct.pack("<B", tag)


write("msgq_ring", "honest", b"\x00" + mq_deliver(b"hd", b"hello") + mq_deliver(b"", b"world", 2) + b"\x01\x02")
write("msgq_ring", "fill", b"\x00" + b"".join(mq_deliver(b"", b"m%d" % i) for i in range(20)) + b"\x01" +
      mq_deliver(b"", b"again"))
write("msgq_ring", "scribble_words", b"\x00" + mq_deliver(b"", b"a") + b"\x03" + struct.pack("<HQ", 24, 0x7) +
      b"\x03" + struct.pack("<HQ", 8, 2**64 - 1) + b"\x01" + mq_deliver(b"", b"b"))
write("msgq_ring", "garbage_ring", b"\x03" + bytes((i * 37) & 0xFF for i in range(2240)) + struct.pack("<II", 1, 0) +
      mq_deliver(b"", b"x") + b"\x01\x02")

# --- fault_page: the fault page as a client may rewrite it (fuzz/fault_page.cpp) -------------
def fault_page(seq=2, active=1, rule_count=1, nth_count=0, link_count=0, action=1, magic=0x46415554):
    head = struct.pack("<IHHIIQ", magic, 1, 64, seq, active, 123456789) + b"\x00" * 40
    cfg = struct.pack("<QIIIIIIIIIIII", 7, 1, 0, 0, 16, 10, 100, 1000, 0, 3, rule_count, nth_count, link_count)
    rule = struct.pack("<IIIB3x", 1 << 1, 0xFFFFFFFF, 500000, action)
    return head + cfg + rule * 16


write("fault_page", "published", fault_page())
write("fault_page", "odd_seq", fault_page(seq=3))
write("fault_page", "nth_count_past_array", fault_page(nth_count=0xFFFF))
write("fault_page", "wild_action", fault_page(action=200, link_count=9))

# --- bte_ring: the BTE engine on a hostile submission ring (fuzz/bte_ring.cpp) ---------------
def bte_req(op=1, cq_mode=2, src_cq=0, tid=1, length=512, local_addr=0, remote_addr=0):
    return struct.pack("<HHHHIIIIIIIIQQQQQQQ", op, cq_mode, 0, 0, src_cq, tid, 7, 8, 1, 0, 0, 0, local_addr, 0, 0,
                       remote_addr, 0, 0, length)


# Selector bits: 1 H's local handle, 2/4/6 target T / victim V / T's handle, 8 length < 2 KiB,
# 16 a real op, 32 H's CQ.
write("bte_ring", "put_get_own_job", bytes([2]) + bytes([0x3B]) + bte_req() + bytes([0x3B]) + bte_req(op=2))
write("bte_ring", "at_other_job", bytes([2]) + bytes([0x3D]) + bte_req() + bytes([0x3D]) + bte_req(op=2, length=8))
write("bte_ring", "mixed", bytes([5]) + b"".join(bytes([s]) + bte_req(length=100 * s) for s in (0x3F, 0x3B, 0x00, 0x39, 0x1A)))
write("bte_ring", "wild_indices", bytes([1]) + bytes([0x3B]) + bte_req() + struct.pack("<QIQ", 2**64 - 1, 1, 12345))

# --- counter_block: a client's counter block copied into the page (fuzz/counter_block.cpp) ---
write("counter_block", "growth", b"\x00" + b"\x00" + struct.pack("<Q", 5) + b"\x02" + b"\x04" + struct.pack("<Q", 7) +
      b"\x02" + b"\x00" + struct.pack("<Q", 9) + b"\x02")
write("counter_block", "backwards_and_magic", b"\x00" + b"\x00" + struct.pack("<Q", 100) + b"\x02" + b"\x00" +
      struct.pack("<Q", 1) + b"\x02" + b"\x01" + struct.pack("<I", 0) + b"\x00" + struct.pack("<Q", 2**64 - 1) +
      b"\x02\x03\x02\x03")
write("counter_block", "table_taken", b"\x01" + b"\x01" * 256 + b"\x03\x00" + struct.pack("<Q", 3) + b"\x02\x03")

# --- ce_engine: library requests and other daemons' messages (fuzz/ce_engine.cpp) ------------
def ce_edge(node=0, ce=0, child=0, type_=1, remote=0):
    return struct.pack("<6I", node, ce, child, type_, remote, 0)


def ce_configure(nchildren, children, parent=None, modes=0):
    has_parent = 1 if parent else 0
    body = struct.pack("<6I", 0, modes, 0, nchildren, has_parent, 0) + (parent or ce_edge())
    kids = b"".join(children) + ce_edge() * (32 - len(children))
    return b"\x01" + b"\x00" * 16 + body + kids


def ce_post(child, first, target=0, cmd=0x14, tid=5, who=0):
    body = struct.pack("<8I", target, 0, child, cmd, 0, 0, tid, 9) + struct.pack("<HHI", 3, 0, 0)
    body += struct.pack("<4Q", 77, first, 0, 0x1000)
    return bytes([2 | (who << 4)]) + b"\x00" * 16 + body


# Edge type: the harness maps 1 -> PE, 2 -> VCE (1 + (type & 1)).
write("ce_engine", "local_sum", b"\x00" + ce_configure(2, [ce_edge(child=0), ce_edge(child=1)]) +
      ce_post(0, 3) + ce_post(1, 4) + b"\x06\x08")
write("ce_engine", "tree_over_nodes", b"\x00" + ce_configure(2, [ce_edge(node=1, child=0, type_=2), ce_edge(child=1)],
                                                           parent=ce_edge(node=2, child=3)) +
      ce_post(1, 5) + ce_post(0, 6, target=1) + b"\x07\x06\x06\x07")
write("ce_engine", "other_job_posts", b"\x00\x10" + ce_configure(1, [ce_edge(child=0)]) + ce_post(0, 1, who=1) +
      b"\x04" + struct.pack("<I", 0) + b"\x06")
contrib = struct.pack("<12I", 1, 0, 0, 2, 0, 9, 0x55550000, 0x14, 0, 0, 0, 0) + struct.pack("<5Q", 1, 77, 3, 0, 0)
write("ce_engine", "peer_messages", b"\x00" + ce_configure(1, [ce_edge(child=0)]) + b"\x05\x00" + b"\x00" * 16 +
      contrib + b"\x25\x02" + b"\x00" * 48 + b"\x05\x04" + b"\x00" * 48 + b"\x06\x06\x06")
