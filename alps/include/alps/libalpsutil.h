/*
 * libalpsutil: the application's placement (nicemu's ALPS compatibility library).
 *
 * SPDX-License-Identifier: BSD-3-Clause
 */
#ifndef NICEMU_ALPS_LIBALPSUTIL_H
#define NICEMU_ALPS_LIBALPSUTIL_H

#include <netinet/in.h>
#include <stdint.h>

#include "alps_toolAssist.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Fills *appLayout with this node's view of application `apid` (the id the APID request of
 * libalpslli answers) and returns malloc'd arrays the caller frees; a NULL argument skips
 * that array:
 *   placementList  numPes entries: node (NIC address) of every PE
 *   targetNids, targetPes, targetLen, targetIps   numTargets entries (none here; a
 *                  one-element zeroed array is returned so that callers may free it)
 *   startPe, totalPes, nodePes, peCpus            numCmds (1) entries: first PE, PEs,
 *                  largest number of PEs on one node, CPUs per PE of the command
 * Returns 1 on success, -1 with errno set on failure (ENOENT: another apid or no job
 * credential in the environment; EINVAL: inconsistent launcher variables).
 */
extern int alps_get_placement_info(uint64_t apid, alpsAppLayout_t *appLayout, int **placementList,
                                   int **targetNids, int **targetPes, int **targetLen,
                                   struct in_addr **targetIps, int **startPe, int **totalPes,
                                   int **nodePes, int **peCpus);

#ifdef __cplusplus
}
#endif

#endif /* NICEMU_ALPS_LIBALPSUTIL_H */
