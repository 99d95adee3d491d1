/*
 * Cray umbrella header: GASNet includes only this one and then uses PMI-1, PMI-2 and the
 * Cray extensions (shared/spec/pmi-api.md §1).
 */
#ifndef NICEMU_PMI_CRAY_H
#define NICEMU_PMI_CRAY_H

#include "pmi.h"
#include "pmi2.h"

#endif /* NICEMU_PMI_CRAY_H */
