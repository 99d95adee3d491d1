// PMIx back end of libpmi (pmix_backend.h). Compiled to "not available" without libpmix.
#include "pmix_backend.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "pmi.h"

#ifdef NICEMU_HAVE_PMIX
#include <pmix.h>
#endif

namespace nicemu::pmi::pmix {

namespace {
bool env_names_pmix() { return std::getenv("PMIX_RANK") && std::getenv("PMIX_NAMESPACE"); }
}  // namespace

#ifdef NICEMU_HAVE_PMIX

namespace {

pmix_proc_t g_me;
int g_size = 1;

bool key_fits(std::string_view key) { return !key.empty() && key.size() < PMIX_MAX_KEYLEN; }

// A string value of `proc` (PMIX_RANK_UNDEF: any rank of the namespace), local data only.
int get_from(uint32_t rank, const std::string& key, std::string& value) {
  pmix_proc_t p;
  std::memset(&p, 0, sizeof p);
  std::memcpy(p.nspace, g_me.nspace, sizeof p.nspace);
  p.rank = rank;
  pmix_info_t info;
  PMIX_INFO_CONSTRUCT(&info);
  bool optional = true;
  PMIX_INFO_LOAD(&info, PMIX_OPTIONAL, &optional, PMIX_BOOL);
  pmix_value_t* v = nullptr;
  pmix_status_t rc = PMIx_Get(&p, key.c_str(), &info, 1, &v);
  PMIX_INFO_DESTRUCT(&info);
  if (rc != PMIX_SUCCESS || !v) return PMI_ERR_INVALID_KEY;
  int out = PMI_ERR_INVALID_KEY;
  if (v->type == PMIX_STRING && v->data.string) {
    value = v->data.string;
    out = PMI_SUCCESS;
  }
  PMIX_VALUE_RELEASE(v);
  return out;
}

bool job_u32(const char* key, uint32_t& out) {
  pmix_proc_t p;
  std::memset(&p, 0, sizeof p);
  std::memcpy(p.nspace, g_me.nspace, sizeof p.nspace);
  p.rank = PMIX_RANK_WILDCARD;
  pmix_value_t* v = nullptr;
  if (PMIx_Get(&p, key, nullptr, 0, &v) != PMIX_SUCCESS || !v) return false;
  bool ok = true;
  switch (v->type) {
    case PMIX_UINT32: out = v->data.uint32; break;
    case PMIX_INT: out = uint32_t(v->data.integer); break;
    default: ok = false;
  }
  PMIX_VALUE_RELEASE(v);
  return ok;
}

}  // namespace

bool selected() { return env_names_pmix(); }
bool requested_but_unavailable() { return false; }

int init(JobFacts& f) {
  pmix_status_t rc = PMIx_Init(&g_me, nullptr, 0);
  if (rc != PMIX_SUCCESS) {
    std::fprintf(stderr, "libpmi: PMIx_Init failed: %s\n", PMIx_Error_string(rc));
    return PMI_FAIL;
  }
  uint32_t size = 0, appnum = 0;
  if (!job_u32(PMIX_JOB_SIZE, size) || size == 0) {
    std::fprintf(stderr, "libpmi: the PMIx server did not give the job size\n");
    return PMI_FAIL;
  }
  job_u32(PMIX_APPNUM, appnum);
  g_size = int(size);
  f.rank = int(g_me.rank);
  f.size = g_size;
  f.appnum = int(appnum);
  f.nspace = g_me.nspace;
  return PMI_SUCCESS;
}

int finalize() { return PMIx_Finalize(nullptr, 0) == PMIX_SUCCESS ? PMI_SUCCESS : PMI_FAIL; }

int put(std::string_view key, std::string_view value) {
  if (!key_fits(key)) return PMI_ERR_INVALID_KEY_LENGTH;
  std::string k(key), v(value);
  pmix_value_t val;
  PMIX_VALUE_CONSTRUCT(&val);
  val.type = PMIX_STRING;
  val.data.string = v.data();  // PMIx_Put copies it
  pmix_status_t rc = PMIx_Put(PMIX_GLOBAL, k.c_str(), &val);
  return rc == PMIX_SUCCESS ? PMI_SUCCESS : PMI_FAIL;
}

int get(std::string_view key, std::string& value) {
  if (!key_fits(key)) return PMI_ERR_INVALID_KEY;
  const std::string k(key);
  // PMI-1 keys have no owner: ask for any rank, then each rank's data (after a fence
  // with data collection it is all local).
  if (get_from(PMIX_RANK_UNDEF, k, value) == PMI_SUCCESS) return PMI_SUCCESS;
  for (int r = 0; r < g_size; ++r)
    if (get_from(uint32_t(r), k, value) == PMI_SUCCESS) return PMI_SUCCESS;
  return PMI_ERR_INVALID_KEY;
}

int fence() {
  if (PMIx_Commit() != PMIX_SUCCESS) return PMI_FAIL;
  pmix_info_t info;
  PMIX_INFO_CONSTRUCT(&info);
  bool collect = true;
  PMIX_INFO_LOAD(&info, PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
  pmix_status_t rc = PMIx_Fence(nullptr, 0, &info, 1);
  PMIX_INFO_DESTRUCT(&info);
  return rc == PMIX_SUCCESS ? PMI_SUCCESS : PMI_FAIL;
}

int universe_size(int& size) {
  uint32_t u = 0;
  size = job_u32(PMIX_UNIV_SIZE, u) && u > 0 ? int(u) : g_size;
  return PMI_SUCCESS;
}

void abort(int exit_code, const char* msg) { PMIx_Abort(exit_code, msg ? msg : "", nullptr, 0); }

#else  // !NICEMU_HAVE_PMIX

bool selected() { return false; }
bool requested_but_unavailable() { return env_names_pmix(); }
int init(JobFacts&) { return PMI_FAIL; }
int finalize() { return PMI_FAIL; }
int put(std::string_view, std::string_view) { return PMI_FAIL; }
int get(std::string_view, std::string&) { return PMI_FAIL; }
int fence() { return PMI_FAIL; }
int universe_size(int&) { return PMI_FAIL; }
void abort(int, const char*) {}

#endif

}  // namespace nicemu::pmi::pmix
