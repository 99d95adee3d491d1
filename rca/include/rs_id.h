/* Cray's RCA split its declarations over rca_lib.h, rs_id.h and rs_meshcoord.h; callers
 * include all three, and nicemu declares everything in rca_lib.h. */
#include "rca_lib.h"
