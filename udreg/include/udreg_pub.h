/*
 * udreg_pub.h — public interface of uDREG, the user-space registration cache, as provided
 * by nicemu's libudreg.
 *
 * Names and signatures follow the project's uDREG fact sheet (shared/spec/udreg-api.md,
 * sections cited as §N). Every numeric value here is one the sheet leaves unconfirmed (§4);
 * nicemu's choices are listed in docs/udreg.md and are kept stable.
 */
#ifndef _UDREG_PUB_H_
#define _UDREG_PUB_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* §1.2 Constants */
#define UDREG_MAX_CACHENAME_LEN 64

/* Returned by a device_reg_func for a hard failure (NULL means "out of resources"). */
#define UDREG_DEVICE_REG_FAILED ((void *) -1)

/* Cache modes, OR-ed into udreg_cache_attr_t.modes. */
#define UDREG_CC_MODE_USE_KERNEL_CACHE  0x00000001u
#define UDREG_CC_MODE_USE_LAZY_DEREG    0x00000002u
#define UDREG_CC_MODE_USE_EVICT_W_UNREG 0x00000004u
#define UDREG_CC_MODE_USE_LARGE_PAGES   0x00000008u

/* §1.2 Return codes */
typedef enum udreg_return {
    UDREG_RC_SUCCESS = 0,
    UDREG_RC_INVALID_PARAM = 1,
    UDREG_RC_NO_SPACE = 2,
    UDREG_RC_NO_MATCH = 3,
    UDREG_RC_ERROR_NO_DEVICE = 4
} udreg_return_t;

/* §1 Statistic selectors for UDREG_GetStat / UDREG_ResetStat. */
typedef enum udreg_stat {
    UDREG_STAT_CACHE_HIT = 0,
    UDREG_STAT_CACHE_MISS = 1,
    UDREG_STAT_CACHE_EVICTED = 2
} udreg_stat_t;

/* Opaque, pointer-sized handle to a cache (clients store it in a void *). */
typedef struct udreg_cache *udreg_cache_handle_t;

/* §1.1 Cache attributes; both spellings (struct udreg_cache_attr, udreg_cache_attr_t) are
 * used by clients. The struct is copied by UDREG_CacheCreate and may live on the stack. */
typedef struct udreg_cache_attr {
    char cache_name[UDREG_MAX_CACHENAME_LEN];
    uint32_t max_entries;
    uint32_t modes;
    int debug_mode;
    int debug_rank;
    void *reg_context;
    void *dreg_context;
    void *destructor_context;
    void *(*device_reg_func)(void *addr, uint64_t length, void *reg_context);
    uint32_t (*device_dereg_func)(void *device_data, void *dreg_context);
    void (*destructor_callback)(void *destructor_context);
} udreg_cache_attr_t;

/* A cache entry. device_data belongs to the client: it holds what device_reg_func returned,
 * the client may replace it (or set it to NULL), and the value current at deregistration is
 * what device_dereg_func receives (NULL is never passed). address and length describe the
 * registered range and are read-only for clients. */
typedef struct udreg_entry {
    void *device_data;
    void *address;
    uint64_t length;
} udreg_entry_t;

/* §2 Functions */
udreg_return_t UDREG_CacheCreate(udreg_cache_attr_t *cache_attr);
udreg_return_t UDREG_CacheAccess(const char *cache_name, udreg_cache_handle_t *cache);
udreg_return_t UDREG_CacheRelease(udreg_cache_handle_t cache);
udreg_return_t UDREG_CacheDestroy(udreg_cache_handle_t cache);
udreg_return_t UDREG_Register(udreg_cache_handle_t cache, void *addr, uint64_t length,
                              udreg_entry_t **entry);
udreg_return_t UDREG_Unregister(udreg_cache_handle_t cache, udreg_entry_t *entry);
udreg_return_t UDREG_DecrRefcount(udreg_cache_handle_t cache, udreg_entry_t *entry);
udreg_return_t UDREG_Evict(udreg_cache_handle_t cache);
udreg_return_t UDREG_GetStat(udreg_cache_handle_t cache, udreg_stat_t stat, uint64_t *value);
udreg_return_t UDREG_ResetStat(udreg_cache_handle_t cache, udreg_stat_t stat);

#ifdef __cplusplus
}
#endif

#endif /* _UDREG_PUB_H_ */
