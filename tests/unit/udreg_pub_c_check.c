/* Compile-only check: udreg_pub.h is valid C11 and accepts the ways its clients use it
 * (both attribute spellings, designated initialisers, the handle stored in a void *,
 * device_data written by the client, UDREG_DEVICE_REG_FAILED compared as a pointer). */
#include <udreg_pub.h>

#include <stddef.h>
#include <string.h>

_Static_assert(sizeof(udreg_cache_handle_t) == sizeof(void *), "the handle is pointer-sized");
_Static_assert(UDREG_RC_SUCCESS == 0, "success is zero");
_Static_assert((UDREG_CC_MODE_USE_KERNEL_CACHE & UDREG_CC_MODE_USE_LAZY_DEREG) == 0 &&
               (UDREG_CC_MODE_USE_EVICT_W_UNREG & UDREG_CC_MODE_USE_LARGE_PAGES) == 0,
               "mode bits are distinct");
_Static_assert(offsetof(udreg_entry_t, device_data) == 0, "device_data first");

int udreg_pub_c_check(void *buf, uint64_t len);

static void *reg_func(void *addr, uint64_t length, void *ctx)
{
    (void) length;
    return ctx ? addr : UDREG_DEVICE_REG_FAILED;
}

static uint32_t dereg_func(void *device_data, void *ctx)
{
    (void) device_data;
    (void) ctx;
    return 0;
}

int udreg_pub_c_check(void *buf, uint64_t len)
{
    udreg_cache_attr_t a = {
        .cache_name = {"c_check"},
        .max_entries = 16,
        .modes = UDREG_CC_MODE_USE_LARGE_PAGES | UDREG_CC_MODE_USE_LAZY_DEREG,
        .debug_mode = 0,
        .debug_rank = 0,
        .reg_context = NULL,
        .dreg_context = NULL,
        .destructor_context = NULL,
        .device_reg_func = reg_func,
        .device_dereg_func = dereg_func,
        .destructor_callback = NULL,
    };
    struct udreg_cache_attr b;
    void *handle_store = NULL;
    udreg_entry_t *entry = NULL;
    uint64_t hits = 0;
    udreg_return_t rc;

    memcpy(&b, &a, sizeof b);
    strncpy(b.cache_name, "c_check_2", UDREG_MAX_CACHENAME_LEN);
    (void) UDREG_CacheCreate(&b);
    rc = UDREG_CacheAccess(b.cache_name, (udreg_cache_handle_t *) &handle_store);
    if (rc != UDREG_RC_SUCCESS)
        return -1;
    rc = UDREG_Register((udreg_cache_handle_t) handle_store, buf, len, &entry);
    if (rc == UDREG_RC_NO_SPACE && UDREG_Evict((udreg_cache_handle_t) handle_store) == UDREG_RC_NO_MATCH)
        return -2;
    if (entry && entry->device_data == UDREG_DEVICE_REG_FAILED)
        return -3;
    if (entry)
        entry->device_data = NULL;
    (void) UDREG_DecrRefcount((udreg_cache_handle_t) handle_store, entry);
    (void) UDREG_Unregister((udreg_cache_handle_t) handle_store, entry);
    (void) UDREG_GetStat((udreg_cache_handle_t) handle_store, UDREG_STAT_CACHE_HIT, &hits);
    (void) UDREG_ResetStat((udreg_cache_handle_t) handle_store, UDREG_STAT_CACHE_EVICTED);
    (void) UDREG_CacheRelease((udreg_cache_handle_t) handle_store);
    return UDREG_CacheDestroy((udreg_cache_handle_t) handle_store) == UDREG_RC_SUCCESS ? (int) hits : -4;
}
