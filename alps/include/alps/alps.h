/*
 * ALPS umbrella header of nicemu's ALPS compatibility libraries (libalpslli, libalpsutil).
 *
 * On a Cray XE/XC system ALPS (the Application Level Placement Scheduler) launches every
 * job and hands each process its GNI credential and its placement. nicemu's launchers
 * (nicemu-run, Hydra or Open MPI with the --daemons-only recipe) put the same facts in the
 * environment; these libraries answer ALPS's application-side calls from there
 * (docs/launchers.md, "ALPS"). Written from the documented interface: names, types and
 * constants match what programs written for Cray systems include and use.
 *
 * SPDX-License-Identifier: BSD-3-Clause
 */
#ifndef NICEMU_ALPS_ALPS_H
#define NICEMU_ALPS_ALPS_H

#include <stdint.h>

/* This is not Cray's ALPS: programs that need to tell can test for it. */
#define NICEMU_ALPS 1

/* The apid type of ALPS: one 64-bit application id per launched job. */
typedef uint64_t alps_apid_t;

#endif /* NICEMU_ALPS_ALPS_H */
