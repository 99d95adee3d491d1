// libpmi's second back end: the PMIx client library, for ranks started by a PMIx server
// (Open MPI's mpirun, Slurm with --mpi=pmix, PRRTE). The PMI-1 KVS maps onto PMIx as
// put -> PMIx_Put(GLOBAL), barrier -> PMIx_Commit + PMIx_Fence(collect data), get ->
// PMIx_Get. PMIx_Init is reference counted by the PMIx library itself, so an MPI library
// in the same process keeps its own init and finalize.
#pragma once
#include <string>
#include <string_view>

namespace nicemu::pmi::pmix {

// True when the environment names a PMIx server (PMIX_RANK and PMIX_NAMESPACE) and this
// libpmi was built with PMIx support.
bool selected();
// True when the variables are there but PMIx support was not built in (for the message).
bool requested_but_unavailable();

struct JobFacts {
  int rank = 0, size = 1, appnum = 0;
  std::string nspace;
};

// PMI_SUCCESS or PMI_FAIL (with a message on stderr).
int init(JobFacts& facts);
int finalize();
int put(std::string_view key, std::string_view value);
// PMI_ERR_INVALID_KEY when no rank has put `key`.
int get(std::string_view key, std::string& value);
int fence();
int universe_size(int& size);
void abort(int exit_code, const char* msg);

}  // namespace nicemu::pmi::pmix
