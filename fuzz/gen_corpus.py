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
CTL_VERSION = header_constant("nicemu/abi/ctl_protocol.h", "kVersion")
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
WIRE_MAGIC, WIRE_VERSION = 0x4E464142, 2


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
