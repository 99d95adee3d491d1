/* dmapp_rev.h: the version of this DMAPP implementation. The macro names of Cray's file
 * could not be checked (shared/spec/dmapp-api.md §14); these are nicemu's. */
#ifndef _DMAPP_REV_H
#define _DMAPP_REV_H

#define DMAPP_MAJOR_VERSION 7
#define DMAPP_MINOR_VERSION 0
#define DMAPP_REVISION 0
#define DMAPP_VERSION ((DMAPP_MAJOR_VERSION << 16) | (DMAPP_MINOR_VERSION << 8) | DMAPP_REVISION)

#endif /* _DMAPP_REV_H */
