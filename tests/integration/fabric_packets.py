#!/usr/bin/env python3
"""Malformed, forged and replayed fabric packets against a live daemon (test_fabric.sh).

Speaks the wire format of nicemu/abi/wire_protocol.h from the address of a node in the
daemon's fabric map (whose daemon is stopped), with the cluster key where a class of bad
packet needs a valid MAC. The AEAD tag comes from fabric_seal (built next to the daemon:
the standard library has no AES-GCM or ChaCha20-Poly1305). Writes, as JSON, the minimum
each drop counter must have grown by.
"""
import argparse
import json
import os
import random
import socket
import struct
import subprocess
import time

MAGIC = 0x4E464142
VERSION = None  # wire::kVersion, asked from fabric_seal (built from the same header)
HDR = struct.Struct("<IBBHIIQQIIQHBBIQ")  # PacketHeader, 64 bytes
REC = struct.Struct("<IHBB")              # RecordHeader, 8 bytes
MAC = 16
MAC_ALG_OFFSET = 50                       # PacketHeader::mac_alg
CTL_MAGIC, CTL_VERSION = 0x4E43544C, 1
assert HDR.size == 64 and REC.size == 8
SEALER = None
next_pn = 1  # the packet number (AEAD nonce): never reused within our epoch


def seal(key, data, alg="auto"):
    """data + its tag, as the daemon's PacketAuth seals it (writes the algorithm byte)."""
    out = subprocess.run([SEALER, alg], input=key.hex() + "\n" + data.hex() + "\n", capture_output=True, text=True,
                         check=True).stdout
    return bytes.fromhex(out.strip())


def header(version, length, src, dst, epoch, dst_epoch, ack, base, count):
    global next_pn
    next_pn += 1
    return HDR.pack(MAGIC, version, 0, length & 0xFFFF, src, dst, epoch, dst_epoch, ack, base, 0, count, 0, 0, 0,
                    next_pn - 1)


def packet(key, src, dst, epoch, records=(), dst_epoch=0, version=None, length_delta=0, ack=0, base=1):
    body = b"".join(REC.pack(seq, len(p), typ, 0) + p for seq, typ, p in records)
    length = HDR.size + len(body) + MAC + length_delta
    return seal(key, header(VERSION if version is None else version, length, src, dst, epoch, dst_epoch, ack, base, len(records)) + body)


def rma_request(kind, length=0, inst=0):
    # RmaRequest: header, id, kind/engine/flags, target inst, ptag, cookie, remote event,
    # AMO command, then base address, total length, offset, length, handle, operands, flag.
    return struct.pack("<IHHIIQHHHHIIIIIIQQQQQQQQQ", CTL_MAGIC, CTL_VERSION, 81, 0, 128, 1, kind, 0, 4, 0, inst,
                       1, 2, 0, 0, 0, 0x1000, max(length, 8), 0, length, 0, 0, 0, 0, 0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--key", required=True)
    ap.add_argument("--target-port", type=int, required=True)
    ap.add_argument("--target-nic", type=int, required=True)
    ap.add_argument("--as-nic", type=int, required=True)
    ap.add_argument("--as-port", type=int, required=True)
    ap.add_argument("--expect-json", required=True)
    ap.add_argument("--sealer", required=True, help="fabric_seal executable")
    a = ap.parse_args()
    global SEALER, VERSION
    SEALER = a.sealer
    VERSION = int(subprocess.run([SEALER, "--wire-version"], capture_output=True, text=True, check=True).stdout)
    key = bytes.fromhex(open(a.key).read().strip())
    rnd = random.Random(4)
    target = ("127.0.0.1", a.target_port)
    me = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    me.bind(("127.0.0.1", a.as_port))         # the map's address of --as-nic
    other = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    other.bind(("127.0.0.1", 0))              # an address not in the map
    epoch = int.from_bytes(os.urandom(8), "little") | 1
    src, dst = a.as_nic, a.target_nic
    want = {}

    def send(sock, data, n=1):
        for _ in range(n):
            sock.sendto(data, target)
            time.sleep(0.0005)  # let the daemon keep up; this tests handling, not its buffer

    # Random bytes, any length: not our magic.
    for _ in range(30):
        send(me, bytes(rnd.getrandbits(8) for _ in range(rnd.randint(72, 1400))))
    want["fabric_drop_magic"] = 30
    # Truncated headers (0 .. 79 bytes) and length fields that lie.
    good = packet(key, src, dst, epoch)
    for n in range(0, 80, 4):
        send(me, good[:n])
    for delta in (-1, 1, 100, -40):
        send(me, packet(key, src, dst, epoch, length_delta=delta))
    bigger = packet(key, src, dst, epoch) + b"\0" * 2000  # larger than any packet we accept
    send(me, bigger)
    want["fabric_drop_length"] = 20 + 4 + 1
    # Another protocol version.
    send(me, packet(key, src, dst, epoch, version=VERSION + 1), 10)
    want["fabric_drop_version"] = 10
    # Bad MACs: another key, one flipped bit, a changed epoch or packet number (another
    # subkey or nonce), an unknown algorithm id.
    wrong = os.urandom(32)
    send(me, packet(wrong, src, dst, epoch, records=[(1, 1, b"x" * 40)]), 10)
    flipped = bytearray(packet(key, src, dst, epoch, records=[(1, 1, b"y" * 40)]))
    flipped[78] ^= 0x10
    send(me, bytes(flipped), 10)
    for off in (16, 56):  # src_epoch, packet_number
        moved = bytearray(packet(key, src, dst, epoch, records=[(1, 1, b"w" * 40)]))
        moved[off] ^= 0x01
        send(me, bytes(moved), 5)
    unknown = bytearray(packet(key, src, dst, epoch, records=[(1, 1, b"v" * 40)]))
    unknown[MAC_ALG_OFFSET] = 0x7F
    send(me, bytes(unknown), 5)
    want["fabric_drop_mac"] = 35
    # Correct MAC, record lengths that do not add up, an unknown record type or a malformed
    # selective-ack extension.
    hdr_only = header(VERSION, HDR.size + REC.size + 4 + MAC, src, dst, epoch, 0, 0, 1, 2)
    body = REC.pack(1, 4, 1, 0) + b"abcd"  # header says 2 records, there is one
    send(me, seal(key, hdr_only + body), 5)
    body = REC.pack(1, 4, 99, 0) + b"abcd"
    hdr_one = header(VERSION, HDR.size + REC.size + 4 + MAC, src, dst, epoch, 0, 0, 1, 1)
    send(me, seal(key, hdr_one + body), 5)
    # A selective-ack extension (record type 3) longer than the window allows.
    body = REC.pack(0, 200, 3, 0) + bytes(200)
    hdr_ext = header(VERSION, HDR.size + REC.size + 200 + MAC, src, dst, epoch, 0, 0, 1, 1)
    send(me, seal(key, hdr_ext + body), 5)
    want["fabric_drop_records"] = 15
    # Unknown sources: a valid packet from an address not in the map, one naming a NIC
    # address not in the map, and one addressed to another node.
    send(other, packet(key, src, dst, epoch), 10)
    send(me, packet(key, 9999, dst, epoch), 5)
    send(me, packet(key, src, dst + 12345, epoch), 5)
    want["fabric_drop_unknown_source"] = 20
    # Addressed to an earlier incarnation of the daemon.
    send(me, packet(key, src, dst, epoch, records=[(1, 1, b"z")], dst_epoch=0x1234), 5)
    want["fabric_drop_stale_epoch"] = 5
    # Valid packets carrying garbage instead of a daemon message: each is delivered once
    # and refused by the daemon's message checks. The first one replayed 10 times: the
    # duplicates are suppressed, never handed on again.
    garbage = [
        b"abc",                                                     # shorter than a header
        struct.pack("<IHHII", 0xDEADBEEF, 1, 24, 0, 16),            # not a control message
        struct.pack("<IHHII", CTL_MAGIC, CTL_VERSION, 2, 0, 16),    # an attach, not for peers
        struct.pack("<IHHII", CTL_MAGIC, CTL_VERSION, 24, 0, 999),  # length lies
        struct.pack("<IHHIIQII", CTL_MAGIC, CTL_VERSION, 26, 0, 32, 7, dst + 1, 0),  # about another node
        # SMSG relay messages (daemon_protocol.h SmsgOpen/SmsgData/SmsgAck): an open about
        # another node, an open with zero credits, data whose length lies, a short ack.
        struct.pack("<IHHII6I3Q4I", CTL_MAGIC, CTL_VERSION, 72, 0, 80, dst + 1, 5, 0, 0, 1, 1, 0, 0, 0, 0, 0, 4, 64),
        struct.pack("<IHHII6I3Q4I", CTL_MAGIC, CTL_VERSION, 72, 0, 80, src, 5, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 64),
        struct.pack("<IHHII4IB7x4s", CTL_MAGIC, CTL_VERSION, 73, 0, 44, 5, 0, 0, 100, 1, b"data"),
        struct.pack("<IHHII3I", CTL_MAGIC, CTL_VERSION, 74, 0, 28, 5, 0, 0),
        # Memory operations (nicemu/abi/remote_ops.h): a request cut short, one of an unknown
        # kind, a PUT whose payload is not there, an answer whose length lies.
        struct.pack("<IHHII", CTL_MAGIC, CTL_VERSION, 81, 0, 16),
        rma_request(kind=9),
        rma_request(kind=1, length=100),
        struct.pack("<IHHIIQQQQQ", CTL_MAGIC, CTL_VERSION, 82, 0, 56, 1, 0, 0, 0, 4096),
    ]
    first = packet(key, src, dst, epoch, records=[(1, 1, garbage[0])])
    send(me, first, 10)
    for i, g in enumerate(garbage[1:], start=2):
        send(me, packet(key, src, dst, epoch, records=[(i, 1, g)]))
    want["fabric_duplicates"] = 9
    want["malformed_messages"] = len(garbage)
    json.dump(want, open(a.expect_json, "w"))
    print("sent:", want)


if __name__ == "__main__":
    main()
