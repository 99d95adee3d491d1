// Cray's PMI collectives (shared/spec/pmi-api.md §3) built on the KVS: each rank puts its
// contribution, hex-encoded and cut into chunks under the server's value limit, a barrier
// publishes them, and every rank reads what it needs. Keys carry a per-call sequence
// number, so no call ever reads another's data. Output is in rank order (a fixed
// permutation, which the sheet allows).
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "client.h"
#include "layout.h"
#include "pmi.h"
#include "wire.h"

namespace {

using nicemu::pmi::Client;
using nicemu::pmi::guarded;

// Raw bytes per KVS value: hex doubles them; two characters of margin for servers that
// count a terminating NUL against vallen_max. A server other than nicemu-run may read each
// request into a 1024-byte buffer whatever vallen_max it announces (Slurm's PMI-2 plugin
// answering PMI-1 does, as MPICH's PMIU_MAXLINE did): there the whole put line must fit.
size_t chunk_bytes(const Client& c) {
  int limit = c.vallen_max() - 2;
  if (!Client::server_is_nicemu_run()) {
    constexpr int kPortableLine = 1024;
    // The line kvs_put sends, with the longest key and no value yet, and a NUL.
    const std::string put = nicemu::pmi::wire::Message("put")
                                .add("kvsname", c.kvsname())
                                .add("key", std::string(static_cast<size_t>(c.keylen_max()), 'k'))
                                .add("value", "")
                                .serialize();
    limit = std::min(limit, kPortableLine - static_cast<int>(put.size()) - 1);
  }
  return static_cast<size_t>(std::max(1, limit / 2));
}

std::string chunk_key(unsigned call, int rank, size_t chunk) {
  return "nicemu_c" + std::to_string(call) + "_" + std::to_string(rank) + "_" +
         std::to_string(chunk);
}

int put_blob(Client& c, unsigned call, const void* data, size_t len) {
  const auto* p = static_cast<const unsigned char*>(data);
  size_t step = chunk_bytes(c);
  for (size_t off = 0, i = 0; off < len; off += step, ++i) {
    size_t n = std::min(step, len - off);
    int rc = c.kvs_put(c.kvsname(), chunk_key(call, c.rank(), i), nicemu::pmi::wire::hex_encode(p + off, n));
    if (rc != PMI_SUCCESS) return rc;
  }
  return PMI_SUCCESS;
}

int get_blob(Client& c, unsigned call, int rank, void* out, size_t len) {
  auto* p = static_cast<unsigned char*>(out);
  size_t step = chunk_bytes(c);
  std::string hex;
  for (size_t off = 0, i = 0; off < len; off += step, ++i) {
    size_t n = std::min(step, len - off);
    int rc = c.kvs_get(c.kvsname(), chunk_key(call, rank, i), hex);
    if (rc == PMI_ERR_INVALID_KEY) {
      // The peer contributed fewer bytes than we expect: mismatched lengths.
      c.report("collective data of rank " + std::to_string(rank) + " is shorter than expected");
      return PMI_ERR_INVALID_SIZE;
    }
    if (rc != PMI_SUCCESS) return rc;
    if (!nicemu::pmi::wire::hex_decode(hex, p + off, n)) {
      c.report("collective data of rank " + std::to_string(rank) + " has an unexpected length");
      return PMI_ERR_INVALID_SIZE;
    }
  }
  return PMI_SUCCESS;
}

// Shared body of the allgathers: contribute `in`, then gather the ranks in `from`, whose
// lengths are `lens`, packed one after the other into `out`.
int gather(const void* in, size_t len, void* out, const std::vector<int>& from,
           const std::vector<size_t>& lens) {
  Client& c = Client::get();
  std::lock_guard lock(c.mutex());
  if (int rc = c.check_init(); rc != PMI_SUCCESS) return rc;
  unsigned call = c.next_collective();
  if (int rc = put_blob(c, call, in, len); rc != PMI_SUCCESS) return rc;
  if (int rc = c.barrier(); rc != PMI_SUCCESS) return rc;
  // Every chunk of every other rank, fetched in one pipelined sweep.
  const size_t step = chunk_bytes(c);
  std::vector<std::string> keys;
  for (size_t i = 0; i < from.size(); ++i)
    if (from[i] != c.rank())
      for (size_t off = 0, k = 0; off < lens[i]; off += step, ++k) keys.push_back(chunk_key(call, from[i], k));
  std::vector<std::string> values;
  std::vector<int> rcs;
  if (int rc = c.kvs_get_many(c.kvsname(), keys, values, rcs); rc != PMI_SUCCESS) return rc;
  auto* dst = static_cast<unsigned char*>(out);
  size_t next = 0;
  for (size_t i = 0; i < from.size(); ++i) {
    if (from[i] == c.rank()) {
      if (len) std::memmove(dst, in, len);  // `in` may alias `out`
      dst += lens[i];
      continue;
    }
    for (size_t off = 0; off < lens[i]; off += step, ++next) {
      const size_t n = std::min(step, lens[i] - off);
      if (rcs[next] == PMI_ERR_INVALID_KEY) {
        // The peer contributed fewer bytes than we expect: mismatched lengths.
        c.report("collective data of rank " + std::to_string(from[i]) + " is shorter than expected");
        return PMI_ERR_INVALID_SIZE;
      }
      if (rcs[next] != PMI_SUCCESS) return rcs[next];
      if (!nicemu::pmi::wire::hex_decode(values[next], dst + off, n)) {
        c.report("collective data of rank " + std::to_string(from[i]) + " has an unexpected length");
        return PMI_ERR_INVALID_SIZE;
      }
    }
    dst += lens[i];
  }
  return PMI_SUCCESS;
}

}  // namespace

extern "C" {

int PMI_Allgather(void* in, void* out, int len) {
  if (len < 0 || (len > 0 && (!in || !out))) return PMI_ERR_INVALID_ARG;
  return guarded([&] {
    Client& c = Client::get();
    if (int rc = c.check_init(); rc != PMI_SUCCESS) return rc;
    std::vector<int> ranks(c.size());
    for (int r = 0; r < c.size(); ++r) ranks[r] = r;
    return gather(in, static_cast<size_t>(len), out, ranks,
                  std::vector<size_t>(c.size(), static_cast<size_t>(len)));
  });
}

int PMI_Allgatherv(void* in, int len, void* out, int* all_lens) {
  if (len < 0 || !all_lens || (len > 0 && !in)) return PMI_ERR_INVALID_ARG;
  return guarded([&] {
    Client& c = Client::get();
    if (int rc = c.check_init(); rc != PMI_SUCCESS) return rc;
    std::vector<int> ranks(c.size());
    std::vector<size_t> lens(c.size());
    size_t total = 0;
    for (int r = 0; r < c.size(); ++r) {
      if (all_lens[r] < 0) return PMI_ERR_INVALID_ARG;
      ranks[r] = r;
      lens[r] = static_cast<size_t>(all_lens[r]);
      total += lens[r];
    }
    if (lens[c.rank()] != static_cast<size_t>(len)) return PMI_ERR_INVALID_ARG;
    if (total > 0 && !out) return PMI_ERR_INVALID_ARG;
    return gather(in, static_cast<size_t>(len), out, ranks, lens);
  });
}

int PMI_Allgather_on_smp(void* in, void* out, int len) {
  if (len < 0 || (len > 0 && (!in || !out))) return PMI_ERR_INVALID_ARG;
  return guarded([&] {
    int rc = PMI_SUCCESS;
    const nicemu::pmi::Layout* layout = nicemu::pmi::get_layout(&rc);
    if (!layout) return rc;
    return gather(in, static_cast<size_t>(len), out, layout->local_ranks,
                  std::vector<size_t>(layout->local_ranks.size(), static_cast<size_t>(len)));
  });
}

int PMI_Bcast(void* buf, int len) {
  if (len < 0 || (len > 0 && !buf)) return PMI_ERR_INVALID_ARG;
  return guarded([&] {
    Client& c = Client::get();
    std::lock_guard lock(c.mutex());
    if (int rc = c.check_init(); rc != PMI_SUCCESS) return rc;
    unsigned call = c.next_collective();
    if (c.rank() == 0) {
      if (int rc = put_blob(c, call, buf, static_cast<size_t>(len)); rc != PMI_SUCCESS) return rc;
    }
    if (int rc = c.barrier(); rc != PMI_SUCCESS) return rc;
    if (c.rank() == 0) return PMI_SUCCESS;
    return get_blob(c, call, 0, buf, static_cast<size_t>(len));
  });
}

}  // extern "C"
