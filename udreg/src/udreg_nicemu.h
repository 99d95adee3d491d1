/* nicemu's own diagnostic entry point of libudreg (not part of the uDREG API, not installed):
 * which invalidation sources the process uses, once the first cache exists. Tests use it to
 * skip what the machine cannot do (userfaultfd refused, hooks not in the symbol path). */
#ifndef NICEMU_UDREG_NICEMU_H
#define NICEMU_UDREG_NICEMU_H

#ifdef __cplusplus
extern "C" {
#endif

#define NICEMU_UDREG_SOURCE_UFFD  0x1u /* userfaultfd monitor running */
#define NICEMU_UDREG_SOURCE_HOOKS 0x2u /* interposed munmap & co. and free reach libudreg */
#define NICEMU_UDREG_SOURCE_NONE  0x4u /* NICEMU_UDREG_INVALIDATION=none */

unsigned nicemu_udreg_invalidation_sources(void);

#ifdef __cplusplus
}
#endif

#endif
