#!/usr/bin/env bash
# gni_bench --test rdv_lat, briefly (issue 37): the rendezvous (registration, handle by SMSG,
# RDMA GET by the peer, answer, deregistration) runs for two sizes with GNI_MemRegister and
# with a uDREG cache, and every GET that was checked read the sender's bytes (gni_bench
# exits non-zero otherwise); bad sizes are refused with a message. Also rdma_put_lat and
# rdma_get_lat (issue 37 item 2) on the one-copy path and through the daemon's BTE engine:
# every post completes without an error event (gni_bench exits non-zero otherwise).
# Usage: test_bench_rdv.sh BUILD_DIR
set -u
. "$(dirname "$0")/lib.sh"
use_build "${1:-}" bench/gni_bench
bench=$BUILD/bench/gni_bench
test_init test_bench_rdv
start_daemon 1 "$TMP/run"
sock=$TMP/run/nic-1.sock
out=$TMP/rdv.csv

# 70 timed + 2 warm-up round trips: iterations 0, 64 and the last are checked at their
# first and last 8 bytes, then one untimed GET at every byte: 4 checked GETs per size and mode.
if "$bench" --socket "$sock" --csv --test rdv_lat --iters 70 --warmup 2 --sizes 100 65536 \
     --rdv-reg both --timeout 120 >"$out" 2>"$TMP/rdv.err"; then
  pass "rdv_lat ran"
else
  fail "rdv_lat exited non-zero"
  show_log "$out" "$TMP/rdv.err"
fi
for t in rdv_lat rdv_p99 rdv_udreg_lat rdv_udreg_p99; do
  for s in 100 65536; do
    v=$(awk -F, -v t=$t -v s=$s '$1 == t && $2 == s && $4 == "us" && $3 > 0 { print $3 }' "$out")
    if [[ -n "$v" ]]; then pass "$t $s B: $v us"; else fail "no $t figure for $s B"; fi
  done
done
for t in rdv_checked rdv_udreg_checked; do
  for s in 100 65536; do
    if grep -qx "$t,$s,4,gets" "$out"; then pass "$t $s B: 4 GETs verified"; else fail "$t $s B: not 4 GETs verified"; fi
  done
done
grep -q '^rdv_smsg_rtt,8,' "$out" && pass "SMSG round trip of the same run" || fail "no SMSG round trip"

if "$bench" --socket "$sock" --test rdv_lat --sizes 102 >"$TMP/bad.out" 2>&1; then
  fail "a size that is not a multiple of 4 was accepted"
elif grep -q "not a multiple of 4" "$TMP/bad.out"; then
  pass "size 102 refused with a message"
else
  fail "size 102 refused without the message"
  show_log "$TMP/bad.out"
fi
for op in put get; do
  for direct in 1 0; do
    lat=$TMP/rdma_$op.$direct
    if NICEMU_RDMA_DIRECT=$direct "$bench" --socket "$sock" --csv --test rdma_${op}_lat --size 64 --iters 20 \
         --warmup 2 --timeout 60 >"$lat" 2>&1 && grep -Eq "^rdma_${op}_lat,64,[0-9.]+,us$" "$lat"; then
      pass "rdma_${op}_lat 64 B, NICEMU_RDMA_DIRECT=$direct"
    else
      fail "rdma_${op}_lat 64 B, NICEMU_RDMA_DIRECT=$direct"
      show_log "$lat"
    fi
  done
done
[[ $FAILS -ne 0 ]] && show_log "$out"
finish bench-rdv 1
