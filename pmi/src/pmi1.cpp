// The PMI-1 API (shared/spec/pmi-api.md §2) over the simple-PMI wire connection.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "client.h"
#include "pmi.h"

using nicemu::pmi::Client;
using nicemu::pmi::copy_out;
using nicemu::pmi::guarded;

namespace {

// Local queries answer from cached job facts, which stay valid after finalize.
int known_or_init() {
  Client& c = Client::get();
  return c.known() ? PMI_SUCCESS : PMI_ERR_INIT;
}

}  // namespace

extern "C" {

int PMI_Init(int* spawned) {
  return guarded([&] { return Client::get().init(spawned); });
}

int PMI_Initialized(PMI_BOOL* initialized) {
  if (!initialized) return PMI_ERR_INVALID_ARG;
  *initialized = Client::get().initialized() ? PMI_TRUE : PMI_FALSE;
  return PMI_SUCCESS;
}

int PMI_Finalize(void) {
  return guarded([&] { return Client::get().finalize(); });
}

int PMI_Abort(int exit_code, const char error_msg[]) {
  Client& c = Client::get();
  (void)guarded([&] {
    c.report("PMI_Abort(" + std::to_string(exit_code) + "): " +
             (error_msg ? error_msg : "(no message)"));
    c.send_abort(exit_code);
    return PMI_SUCCESS;
  });
  std::exit(exit_code);
}

int PMI_Get_size(int* size) {
  if (!size) return PMI_ERR_INVALID_ARG;
  if (int rc = known_or_init(); rc != PMI_SUCCESS) return rc;
  *size = Client::get().size();
  return PMI_SUCCESS;
}

int PMI_Get_rank(int* rank) {
  if (!rank) return PMI_ERR_INVALID_ARG;
  if (int rc = known_or_init(); rc != PMI_SUCCESS) return rc;
  *rank = Client::get().rank();
  return PMI_SUCCESS;
}

int PMI_Get_universe_size(int* size) {
  if (!size) return PMI_ERR_INVALID_ARG;
  return guarded([&] { return Client::get().universe_size(size); });
}

int PMI_Get_appnum(int* appnum) {
  if (!appnum) return PMI_ERR_INVALID_ARG;
  if (int rc = known_or_init(); rc != PMI_SUCCESS) return rc;
  *appnum = Client::get().appnum();
  return PMI_SUCCESS;
}

int PMI_Get_id(char id_str[], int length) {
  if (int rc = known_or_init(); rc != PMI_SUCCESS) return rc;
  return guarded([&] { return copy_out(Client::get().kvsname(), id_str, length); });
}

int PMI_Get_kvs_domain_id(char id_str[], int length) { return PMI_Get_id(id_str, length); }

int PMI_Get_id_length_max(int* length) { return PMI_KVS_Get_name_length_max(length); }

int PMI_Barrier(void) {
  return guarded([&] { return Client::get().barrier(); });
}

int PMI_KVS_Get_my_name(char kvsname[], int length) {
  if (int rc = known_or_init(); rc != PMI_SUCCESS) return rc;
  return guarded([&] { return copy_out(Client::get().kvsname(), kvsname, length); });
}

int PMI_KVS_Get_name_length_max(int* length) {
  if (!length) return PMI_ERR_INVALID_ARG;
  if (int rc = known_or_init(); rc != PMI_SUCCESS) return rc;
  *length = Client::get().kvsname_max();
  return PMI_SUCCESS;
}

int PMI_KVS_Get_key_length_max(int* length) {
  if (!length) return PMI_ERR_INVALID_ARG;
  if (int rc = known_or_init(); rc != PMI_SUCCESS) return rc;
  *length = Client::get().keylen_max();
  return PMI_SUCCESS;
}

int PMI_KVS_Get_value_length_max(int* length) {
  if (!length) return PMI_ERR_INVALID_ARG;
  if (int rc = known_or_init(); rc != PMI_SUCCESS) return rc;
  *length = Client::get().vallen_max();
  return PMI_SUCCESS;
}

// One KVS per job on the servers nicemu talks to: creating others is not supported.
int PMI_KVS_Create(char kvsname[], int length) {
  (void)kvsname;
  (void)length;
  return PMI_FAIL;
}

int PMI_KVS_Destroy(const char kvsname[]) {
  (void)kvsname;
  return PMI_FAIL;
}

int PMI_KVS_Put(const char kvsname[], const char key[], const char value[]) {
  if (!kvsname) return PMI_ERR_INVALID_ARG;
  if (!key) return PMI_ERR_INVALID_KEY;
  if (!value) return PMI_ERR_INVALID_VAL;
  return guarded([&] { return Client::get().kvs_put(kvsname, key, value); });
}

// Simple-PMI puts reach the server at once; the barrier is what publishes them.
int PMI_KVS_Commit(const char kvsname[]) {
  if (!kvsname) return PMI_ERR_INVALID_ARG;
  return Client::get().check_init();
}

int PMI_KVS_Get(const char kvsname[], const char key[], char value[], int length) {
  if (!kvsname) return PMI_ERR_INVALID_ARG;
  if (!key) return PMI_ERR_INVALID_KEY;
  if (!value || length <= 0) return PMI_ERR_INVALID_LENGTH;
  return guarded([&] {
    std::string v;
    if (int rc = Client::get().kvs_get(kvsname, key, v); rc != PMI_SUCCESS) return rc;
    return copy_out(v, value, length);
  });
}

// Name service and dynamic processes: not provided by the servers nicemu supports.
int PMI_Publish_name(const char service_name[], const char port[]) {
  (void)service_name;
  (void)port;
  return PMI_FAIL;
}

int PMI_Unpublish_name(const char service_name[]) {
  (void)service_name;
  return PMI_FAIL;
}

int PMI_Lookup_name(const char service_name[], char port[]) {
  (void)service_name;
  (void)port;
  return PMI_FAIL;
}

int PMI_Spawn_multiple(int count, const char* cmds[], const char** argvs[], const int maxprocs[],
                       const int info_keyval_sizesp[], const PMI_keyval_t* info_keyval_vectors[],
                       int preput_keyval_size, const PMI_keyval_t preput_keyval_vector[],
                       int errors[]) {
  (void)cmds;
  (void)argvs;
  (void)maxprocs;
  (void)info_keyval_sizesp;
  (void)info_keyval_vectors;
  (void)preput_keyval_size;
  (void)preput_keyval_vector;
  if (errors)
    for (int i = 0; i < count; ++i) errors[i] = PMI_FAIL;
  return PMI_FAIL;
}

}  // extern "C"
