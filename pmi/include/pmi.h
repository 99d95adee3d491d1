/*
 * Cray PMI: the MPICH PMI-1 client API plus the Cray extensions (allgather, node and
 * topology queries). Names, values and signatures follow shared/spec/pmi-api.md §2-§3;
 * signatures the sheet marks "unconfirmed" are noted where declared.
 */
#ifndef NICEMU_PMI_H
#define NICEMU_PMI_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Return codes (§2.1; MPICH reference values). */
#define PMI_SUCCESS 0
#define PMI_FAIL -1
#define PMI_ERR_INIT 1
#define PMI_ERR_NOMEM 2
#define PMI_ERR_INVALID_ARG 3
#define PMI_ERR_INVALID_KEY 4
#define PMI_ERR_INVALID_KEY_LENGTH 5
#define PMI_ERR_INVALID_VAL 6
#define PMI_ERR_INVALID_VAL_LENGTH 7
#define PMI_ERR_INVALID_LENGTH 8
#define PMI_ERR_INVALID_NUM_ARGS 9
#define PMI_ERR_INVALID_ARGS 10
#define PMI_ERR_INVALID_NUM_PARSED 11
#define PMI_ERR_INVALID_KEYVALP 12
#define PMI_ERR_INVALID_SIZE 13
#define PMI_ERR_INVALID_KVS 14

typedef int PMI_BOOL;
#define PMI_TRUE 1
#define PMI_FALSE 0

typedef struct PMI_keyval_t {
  const char *key;
  char *val;
} PMI_keyval_t;

/* Cray topology types (§3; member types unconfirmed, uint16_t as suggested). */
typedef uint16_t pmi_nid_t;
typedef struct {
  uint16_t mesh_x;
  uint16_t mesh_y;
  uint16_t mesh_z;
} pmi_mesh_coord_t;
typedef int pmi_nic_addr_t;

/* ---- PMI-1 (§2.2) ---- */
int PMI_Init(int *spawned);
int PMI_Initialized(PMI_BOOL *initialized);
int PMI_Finalize(void);
int PMI_Abort(int exit_code, const char error_msg[]);

int PMI_Get_size(int *size);
int PMI_Get_rank(int *rank);
int PMI_Get_universe_size(int *size);
int PMI_Get_appnum(int *appnum);
int PMI_Get_id(char id_str[], int length);
int PMI_Get_kvs_domain_id(char id_str[], int length);
int PMI_Get_id_length_max(int *length);
int PMI_Get_clique_size(int *size);
int PMI_Get_clique_ranks(int ranks[], int length);

int PMI_Barrier(void);

int PMI_KVS_Get_my_name(char kvsname[], int length);
int PMI_KVS_Get_name_length_max(int *length);
int PMI_KVS_Get_key_length_max(int *length);
int PMI_KVS_Get_value_length_max(int *length);
int PMI_KVS_Create(char kvsname[], int length);
int PMI_KVS_Destroy(const char kvsname[]);
int PMI_KVS_Put(const char kvsname[], const char key[], const char value[]);
int PMI_KVS_Commit(const char kvsname[]);
int PMI_KVS_Get(const char kvsname[], const char key[], char value[], int length);

int PMI_Publish_name(const char service_name[], const char port[]);
int PMI_Unpublish_name(const char service_name[]);
int PMI_Lookup_name(const char service_name[], char port[]);

int PMI_Spawn_multiple(int count, const char *cmds[], const char **argvs[],
                       const int maxprocs[], const int info_keyval_sizesp[],
                       const PMI_keyval_t *info_keyval_vectors[], int preput_keyval_size,
                       const PMI_keyval_t preput_keyval_vector[], int errors[]);

/* ---- Cray extensions (§3) ---- */
/* Collectives over the whole job. The output order of the allgathers is rank order here
 * (a fixed permutation, as the sheet allows). */
int PMI_Allgather(void *in, void *out, int len);
int PMI_Allgatherv(void *in, int len, void *out, int *all_lens);
int PMI_Bcast(void *buf, int len);
/* Existence and signature unconfirmed. Every rank of the job must call it; each receives
 * the contributions of the ranks on its own node, in rank order. */
int PMI_Allgather_on_smp(void *in, void *out, int len);

int PMI_Get_nid(int rank, int *nid);
int PMI_Get_nidlist_ptr(void **nidlist);
int PMI_Get_numpes_on_smp(int *num);
int PMI_Get_pes_on_smp(int *pes, int num); /* signature unconfirmed */
int PMI_Get_numpes_in_app_on_smp(int *num);
int PMI_Get_meshcoord(pmi_nid_t nid, pmi_mesh_coord_t *xyz);
int PMI_Get_max_dimension(pmi_mesh_coord_t *max);
int PMI_nid_to_nicaddrs(int nid, int count, pmi_nic_addr_t *nicaddrs); /* types inferred */
int PMI_Get_rank_in_app(int *rank);                                    /* unconfirmed */
int PMI_Get_version_info(int *major, int *minor, int *revision);

/* Exported by Cray libpmi 5.x; signatures unconfirmed (int * out parameters). */
int PMI_CRAY_Get_app_size(int *size);
int PMI_CRAY_Get_num_apps(int *num_apps);
int PMI_CRAY_Get_rank_in_app(int *rank);
int PMI_CRAY_Get_base_rank_in_app(int *base_rank);
/* Resolves a node name ("nid00012" or this host's name) to its node id. */
int PMI_CRAY_gethostbyname(const char *hostname, int *nid);

#ifdef __cplusplus
}
#endif

#endif /* NICEMU_PMI_H */
