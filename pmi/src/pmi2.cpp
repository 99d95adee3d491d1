// The PMI-2 API (shared/spec/pmi-api.md §4) carried over the same PMI-1 wire connection
// as PMI-1 (one process-wide client, shared init reference count). Fence is a barrier;
// node attributes are KVS keys scoped by node id (portable use: put, fence, then get).
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "client.h"
#include "layout.h"
#include "pmi.h"
#include "pmi2.h"

using nicemu::pmi::Client;
using nicemu::pmi::copy_out;
using nicemu::pmi::guarded;

// PMI-2 codes equal PMI-1's (spec §4.1), so bodies return either.
static_assert(PMI2_SUCCESS == PMI_SUCCESS && PMI2_FAIL == PMI_FAIL &&
              PMI2_ERR_INVALID_LENGTH == PMI_ERR_INVALID_LENGTH &&
              PMI2_ERR_INVALID_SIZE == PMI_ERR_INVALID_SIZE);

namespace {

// "kvs_<N>", which older Open MPI parses with "kvs_%u": the KVS name itself when it
// already starts that way (Hydra's kvs_<pid>_0, nicemu-run's kvs_<pid>), else a number
// derived from it.
std::string job_id() {
  const std::string& kvs = Client::get().kvsname();
  if (kvs.size() > 4 && kvs.compare(0, 4, "kvs_") == 0 && kvs[4] >= '0' && kvs[4] <= '9')
    return kvs;
  return "kvs_" + std::to_string(std::hash<std::string>{}(kvs) % 1000000000u);
}

bool own_job(const char* jobid) {
  return !jobid || !*jobid || jobid == job_id() || jobid == Client::get().kvsname();
}

// Job attribute text; PMI_ERR_INVALID_KEY when the attribute is unknown or absent.
int job_attr(const std::string& name, std::string& value) {
  Client& c = Client::get();
  if (name == "universeSize") {
    int n = 0;
    if (int rc = c.universe_size(&n); rc != PMI_SUCCESS) return rc;
    value = std::to_string(n);
    return PMI_SUCCESS;
  }
  if (name == "PMI_process_mapping") return c.kvs_get(c.kvsname(), name, value);
  return PMI_ERR_INVALID_KEY;
}

int node_key(const std::string& name, std::string& key) {
  int rc = PMI_SUCCESS;
  const nicemu::pmi::Layout* layout = nicemu::pmi::get_layout(&rc);
  if (!layout) return rc;
  key = "nicemu_node" + std::to_string(layout->my_nid) + "_" + name;
  return PMI_SUCCESS;
}

// This process's own node attributes: visible to itself at once. Other ranks see a put
// when the server publishes it — at once on nicemu-run, only after the next fence on
// Hydra, whose proxies hold puts back until the barrier.
std::map<std::string, std::string>& own_node_attrs() {
  static auto* attrs = new std::map<std::string, std::string>();
  return *attrs;
}

// Node attribute text; PMI_ERR_INVALID_KEY when absent. `wait`: poll until it appears.
int node_attr(const std::string& name, bool wait, std::string& value) {
  Client& c = Client::get();
  {
    std::lock_guard lock(c.mutex());
    auto it = own_node_attrs().find(name);
    if (it != own_node_attrs().end()) {
      value = it->second;
      return PMI_SUCCESS;
    }
  }
  std::string key;
  if (int rc = node_key(name, key); rc != PMI_SUCCESS) return rc;
  auto delay = std::chrono::microseconds(100);
  for (;;) {
    int rc = c.kvs_get(c.kvsname(), key, value);
    if (rc != PMI_ERR_INVALID_KEY || !wait) return rc;
    std::this_thread::sleep_for(delay);
    delay = std::min<std::chrono::microseconds>(delay * 2, std::chrono::milliseconds(10));
  }
}

// "3,4,5" -> ints (negative ones too); the empty string is an empty list.
bool parse_ints(const std::string& s, std::vector<int>& out) {
  out.clear();
  return s.empty() || nicemu::pmi::parse_int_list(s, -2147483647L - 1, out);
}

// Common tail of the *IntArray calls.
int int_array_out(int lookup_rc, const std::string& text, int array[], int arraylen,
                  int* outlen, int* found) {
  if (lookup_rc == PMI_ERR_INVALID_KEY) {
    *found = 0;
    *outlen = 0;
    return PMI2_SUCCESS;
  }
  if (lookup_rc != PMI_SUCCESS) return lookup_rc;
  std::vector<int> v;
  if (!parse_ints(text, v)) return PMI2_ERR_INVALID_VAL;
  *found = 1;
  int n = std::min<int>(arraylen, static_cast<int>(v.size()));
  for (int i = 0; i < n; ++i) array[i] = v[i];
  *outlen = n;
  return static_cast<int>(v.size()) > arraylen ? PMI2_ERR_INVALID_LENGTH : PMI2_SUCCESS;
}

}  // namespace

extern "C" {

int PMI2_Init(int* spawned, int* size, int* rank, int* appnum) {
  return guarded([&] {
    Client& c = Client::get();
    if (int rc = c.init(spawned); rc != PMI_SUCCESS) return rc;
    if (size) *size = c.size();
    if (rank) *rank = c.rank();
    if (appnum) *appnum = c.appnum();
    return PMI2_SUCCESS;
  });
}

int PMI2_Finalize(void) {
  return guarded([&] { return Client::get().finalize(); });
}

int PMI2_Initialized(void) { return Client::get().initialized() ? 1 : 0; }

// flag non-zero: the whole job; zero: only this process (its non-zero exit status then
// ends the job under nicemu-run anyway).
int PMI2_Abort(int flag, const char msg[]) {
  Client& c = Client::get();
  (void)guarded([&] {
    c.report(std::string("PMI2_Abort: ") + (msg ? msg : "(no message)"));
    if (flag) c.send_abort(1);
    return PMI_SUCCESS;
  });
  std::exit(1);
}

int PMI2_Job_Spawn(int count, const char* cmds[], int argcs[], const char** argvs[],
                   const int maxprocs[], const int info_keyval_sizes[],
                   const struct MPID_Info* info_keyval_vectors[], int preput_keyval_size,
                   const struct MPID_Info* preput_keyval_vector[], char jobId[], int jobIdSize,
                   int errors[]) {
  (void)cmds;
  (void)argcs;
  (void)argvs;
  (void)maxprocs;
  (void)info_keyval_sizes;
  (void)info_keyval_vectors;
  (void)preput_keyval_size;
  (void)preput_keyval_vector;
  (void)jobId;
  (void)jobIdSize;
  if (errors)
    for (int i = 0; i < count; ++i) errors[i] = PMI2_FAIL;
  return PMI2_FAIL;
}

int PMI2_Job_GetId(char jobid[], int jobid_size) {
  if (!Client::get().known()) return PMI2_ERR_INIT;
  return guarded([&] { return copy_out(job_id(), jobid, jobid_size); });
}

int PMI2_Job_GetRank(int* rank) {
  if (!rank) return PMI2_ERR_INVALID_ARG;
  if (!Client::get().known()) return PMI2_ERR_INIT;
  *rank = Client::get().rank();
  return PMI2_SUCCESS;
}

int PMI2_Info_GetSize(int* size) {
  if (!size) return PMI2_ERR_INVALID_ARG;
  if (!Client::get().known()) return PMI2_ERR_INIT;
  *size = Client::get().size();
  return PMI2_SUCCESS;
}

int PMI2_Job_Connect(const char jobid[], PMI2_Connect_comm_t* conn) {
  (void)jobid;
  (void)conn;
  return PMI2_FAIL;
}

int PMI2_Job_Disconnect(const char jobid[]) {
  (void)jobid;
  return PMI2_FAIL;
}

int PMI2_KVS_Put(const char key[], const char value[]) {
  if (!key) return PMI2_ERR_INVALID_KEY;
  if (!value) return PMI2_ERR_INVALID_VAL;
  return guarded([&] {
    Client& c = Client::get();
    return c.kvs_put(c.kvsname(), key, value);
  });
}

int PMI2_KVS_Fence(void) {
  return guarded([&] { return Client::get().barrier(); });
}

// *vallen is the value's length, or its negative when it did not fit in maxvalue (then
// the copy is truncated and PMI2_ERR_INVALID_LENGTH returned).
int PMI2_KVS_Get(const char* jobid, int src_pmi_id, const char key[], char value[],
                 int maxvalue, int* vallen) {
  (void)src_pmi_id;  // only a hint
  if (!key) return PMI2_ERR_INVALID_KEY;
  if (!value || maxvalue <= 0) return PMI2_ERR_INVALID_LENGTH;
  return guarded([&] {
    Client& c = Client::get();
    if (int rc = c.check_init(); rc != PMI_SUCCESS) return rc;
    if (!own_job(jobid)) return PMI2_ERR_INVALID_ARG;  // other jobs' KVS: not reachable
    std::string v;
    if (int rc = c.kvs_get(c.kvsname(), key, v); rc != PMI_SUCCESS) return rc;
    int rc = copy_out(v, value, maxvalue);
    if (vallen) *vallen = rc == PMI_SUCCESS ? static_cast<int>(v.size()) : -static_cast<int>(v.size());
    return rc;
  });
}

int PMI2_Info_GetJobAttr(const char name[], char value[], int valuelen, int* found) {
  if (!name || !found) return PMI2_ERR_INVALID_ARG;
  return guarded([&] {
    if (int rc = Client::get().check_init(); rc != PMI_SUCCESS) return rc;
    std::string v;
    int rc = job_attr(name, v);
    if (rc == PMI_ERR_INVALID_KEY) {
      *found = 0;
      return PMI2_SUCCESS;
    }
    if (rc != PMI_SUCCESS) return rc;
    *found = 1;
    return copy_out(v, value, valuelen);
  });
}

int PMI2_Info_GetJobAttrIntArray(const char name[], int array[], int arraylen, int* outlen,
                                 int* found) {
  if (!name || !found || !outlen || (arraylen > 0 && !array)) return PMI2_ERR_INVALID_ARG;
  return guarded([&] {
    if (int rc = Client::get().check_init(); rc != PMI_SUCCESS) return rc;
    std::string v;
    int rc = job_attr(name, v);
    return int_array_out(rc, v, array, arraylen, outlen, found);
  });
}

int PMI2_Info_PutNodeAttr(const char name[], const char value[]) {
  if (!name) return PMI2_ERR_INVALID_KEY;
  if (!value) return PMI2_ERR_INVALID_VAL;
  return guarded([&] {
    Client& c = Client::get();
    if (int rc = c.check_init(); rc != PMI_SUCCESS) return rc;
    std::string key;
    if (int rc = node_key(name, key); rc != PMI_SUCCESS) return rc;
    std::lock_guard lock(c.mutex());
    int rc = c.kvs_put(c.kvsname(), key, value);
    if (rc == PMI_SUCCESS) own_node_attrs()[name] = value;
    return rc;
  });
}

int PMI2_Info_GetNodeAttr(const char name[], char value[], int valuelen, int* found,
                          int waitfor) {
  if (!name || !found) return PMI2_ERR_INVALID_ARG;
  return guarded([&] {
    if (int rc = Client::get().check_init(); rc != PMI_SUCCESS) return rc;
    std::string v;
    int rc = node_attr(name, waitfor != 0, v);
    if (rc == PMI_ERR_INVALID_KEY) {
      *found = 0;
      return PMI2_SUCCESS;
    }
    if (rc != PMI_SUCCESS) return rc;
    *found = 1;
    return copy_out(v, value, valuelen);
  });
}

int PMI2_Info_GetNodeAttrIntArray(const char name[], int array[], int arraylen, int* outlen,
                                  int* found) {
  if (!name || !found || !outlen || (arraylen > 0 && !array)) return PMI2_ERR_INVALID_ARG;
  return guarded([&] {
    if (int rc = Client::get().check_init(); rc != PMI_SUCCESS) return rc;
    std::string v;
    int rc = node_attr(name, false, v);
    return int_array_out(rc, v, array, arraylen, outlen, found);
  });
}

int PMI2_Nameserv_publish(const char service_name[], const struct MPID_Info* info_ptr,
                          const char port[]) {
  (void)service_name;
  (void)info_ptr;
  (void)port;
  return PMI2_FAIL;
}

int PMI2_Nameserv_lookup(const char service_name[], const struct MPID_Info* info_ptr,
                         char port[], int portLen) {
  (void)service_name;
  (void)info_ptr;
  (void)port;
  (void)portLen;
  return PMI2_FAIL;
}

int PMI2_Nameserv_unpublish(const char service_name[], const struct MPID_Info* info_ptr) {
  (void)service_name;
  (void)info_ptr;
  return PMI2_FAIL;
}

}  // extern "C"
