/* nicemu's Cray RCA (Resiliency Communication Agent) user library: the node's id, its
 * place on the machine's 3-D torus and the machine's nodes, as librca answers them on a
 * Cray XE/XC. Here the machine is nicemu's emulated torus (NICEMU_TORUS, docs/cray-pe.md)
 * and a node's id is its NIC address (PMI_GNI_LOC_ADDR).
 *
 * Return values follow the callers in public code: 0 on success, -1 on failure. */
#ifndef RCA_LIB_H
#define RCA_LIB_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Mesh coordinates of a node (rca_get_meshcoord) and the largest coordinate on each axis
 * (rca_get_max_dimension; callers add 1 for the side lengths). */
typedef struct rca_mesh_coord_s {
  uint16_t mesh_x;
  uint16_t mesh_y;
  uint16_t mesh_z;
} rca_mesh_coord_t;
typedef rca_mesh_coord_t mesh_coord_t;

/* Node states (_node_state). */
#define RS_CS_EMPTY 0
#define RS_CS_READY 4
#define RS_CS_DOWN 7

/* A node: its id, state and physical location, as bit fields; rs_node_flat is the same
 * 64 bits as one word. The location is nicemu's numbering of the torus into cabinets
 * (rs_phys2str): 4 nodes per blade (_node_modcomp), 2 per network chip (_node_link),
 * 8 blades per chassis, 3 chassis per cabinet, 16 cabinets per row. */
typedef union rs_node_u {
  uint64_t rs_node_flat;
  struct {
    uint64_t _node_arch : 2;
    uint64_t _node_type : 6;
    uint64_t _node_state : 7;
    uint64_t _node_is_svc : 1;
    uint64_t _node_id : 16;
    uint64_t _node_x : 8;       /* cabinet within the row */
    uint64_t _node_row : 8;
    uint64_t _node_cage : 4;    /* chassis within the cabinet */
    uint64_t _node_slot : 4;    /* blade within the chassis */
    uint64_t _node_modcomp : 4; /* node within the blade */
    uint64_t _node_link : 4;    /* network chip within the blade */
  } rs_node_s;
} rs_node_t;

/* The machine's nodes (rca_get_sysnodes): na_ids is malloc()ed, the caller free()s it. */
typedef struct rs_node_array_s {
  uint32_t na_len;
  rs_node_t* na_ids;
} rs_node_array_t;

/* This node. */
int rca_get_nodeid(rs_node_t* node);
/* Coordinates of node `nid`; -1 when nid lies outside the torus. */
int rca_get_meshcoord(uint16_t nid, rca_mesh_coord_t* xyz);
/* The largest coordinate on each axis. */
int rca_get_max_dimension(rca_mesh_coord_t* max);
/* The topology class: nicemu reports RCA_TOPO_TORUS3D for its torus. */
#define RCA_TOPO_TORUS3D 3
int rca_get_meshtopology(int* topology_class);
/* Every node of the machine, state RS_CS_READY. */
int rca_get_sysnodes(rs_node_array_t* nodes);
/* The node's Cray name, "c<cabinet>-<row>c<chassis>s<blade>n<node>", into `buf` (at
 * least 32 bytes). */
int rs_phys2str(const rs_node_t* node, char* buf);

#ifdef __cplusplus
}
#endif

#endif /* RCA_LIB_H */
