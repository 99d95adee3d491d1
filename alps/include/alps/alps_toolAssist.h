/*
 * alpsAppLayout_t: an application's placement as seen from one node, the structure
 * alps_get_placement_info (libalpsutil.h) fills in. Field names, types and order are those
 * of Cray's ALPS interface, which clients read by name (libfabric's gni provider reads
 * numPesHere and firstPe). Variable-length parts are returned as separate arrays by
 * alps_get_placement_info; the off* fields are 0 here (there is no placement file).
 *
 * SPDX-License-Identifier: BSD-3-Clause
 */
#ifndef NICEMU_ALPS_TOOLASSIST_H
#define NICEMU_ALPS_TOOLASSIST_H

#include <inttypes.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct {
  size_t totLength;         /* size of this structure (ALPS: of the placement file) */
  uint64_t apid;            /* application id */
  int controlNid;           /* node controlling this one: -1, nicemu has no fan-out tree */
  struct in_addr conIpAddr; /* its IP address: 0.0.0.0 */
  int firstPe;              /* first PE (rank) placed on this node */
  int numPesHere;           /* PEs placed on this node */
  int cpuMask;              /* CPUs allocated here (bit mask of the first 31 CPUs) */
  int peDepth;              /* CPUs per PE: 1 */
  int cmdNumber;            /* command of the MPMD set: 0 */
  int numPes;               /* PEs of the whole application */
  size_t offNidList;        /* 0: the list is returned as placementList */
  int numTargets;           /* nodes controlled by this node: 0 */
  size_t offTargetNid;
  size_t offTargetPe;
  size_t offTargetLen;
  size_t offTargetIp;
  int numCmds;              /* commands of the MPMD set: 1 */
  size_t offStartPe;
  size_t offNumPes;
  size_t offPerNode;
  size_t offDepth;
} alpsAppLayout_t;

#endif /* NICEMU_ALPS_TOOLASSIST_H */
