/* Every rank compares librca with Cray PMI on its own node (built by the cc driver in
 * test_craype.sh): rca_get_nodeid against PMI_GNI_LOC_ADDR, rca_get_meshcoord of that id
 * against PMI_Get_meshcoord of the rank's PMI nid, and the maximum dimensions. Prints
 * "rca rank R of S nid N xyz X Y Z max MX MY MZ nodes K name C" and exits 1 on a mismatch. */
#include <pmi.h>
#include <rca_lib.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(cond)                                                         \
  do {                                                                      \
    if (!(cond)) {                                                          \
      fprintf(stderr, "rca_check: rank %d: %s failed\n", rank, #cond);      \
      status = 1;                                                           \
    }                                                                       \
  } while (0)

int main(void) {
  int spawned = 0, rank = -1, size = 0, status = 0;
  if (PMI_Init(&spawned) != PMI_SUCCESS || PMI_Get_rank(&rank) != PMI_SUCCESS ||
      PMI_Get_size(&size) != PMI_SUCCESS) {
    fprintf(stderr, "rca_check: PMI_Init failed (run it under a launcher)\n");
    return 1;
  }
  rs_node_t node;
  CHECK(rca_get_nodeid(&node) == 0);
  const char *loc = getenv("PMI_GNI_LOC_ADDR");
  CHECK(loc && (unsigned)atoi(loc) == (unsigned)node.rs_node_s._node_id);
  CHECK(node.rs_node_s._node_state == RS_CS_READY);

  rca_mesh_coord_t xyz, max;
  pmi_mesh_coord_t pxyz, pmax;
  int nid = -1;
  CHECK(rca_get_meshcoord((uint16_t)node.rs_node_s._node_id, &xyz) == 0);
  CHECK(rca_get_max_dimension(&max) == 0);
  CHECK(PMI_Get_nid(rank, &nid) == PMI_SUCCESS);
  CHECK(PMI_Get_meshcoord((pmi_nid_t)nid, &pxyz) == PMI_SUCCESS);
  CHECK(PMI_Get_max_dimension(&pmax) == PMI_SUCCESS);
  CHECK(xyz.mesh_x == pxyz.mesh_x && xyz.mesh_y == pxyz.mesh_y && xyz.mesh_z == pxyz.mesh_z);
  CHECK(max.mesh_x == pmax.mesh_x && max.mesh_y == pmax.mesh_y && max.mesh_z == pmax.mesh_z);
  CHECK(rca_get_meshcoord(0xFFFF, &xyz) == -1 || max.mesh_x == 0xFFFE);  /* outside the torus */
  CHECK(rca_get_meshcoord((uint16_t)node.rs_node_s._node_id, &xyz) == 0);

  int topology = -1;
  CHECK(rca_get_meshtopology(&topology) == 0 && topology == RCA_TOPO_TORUS3D);
  rs_node_array_t all = {0, NULL};
  CHECK(rca_get_sysnodes(&all) == 0);
  CHECK(all.na_len == (uint32_t)(max.mesh_x + 1) * (max.mesh_y + 1) * (max.mesh_z + 1));
  char name[32] = "";
  CHECK(rs_phys2str(&node, name) == 0);

  printf("rca rank %d of %d nid %u xyz %u %u %u max %u %u %u nodes %u name %s\n", rank, size,
         (unsigned)node.rs_node_s._node_id, xyz.mesh_x, xyz.mesh_y, xyz.mesh_z, max.mesh_x, max.mesh_y,
         max.mesh_z, all.na_len, name);
  free(all.na_ids);
  PMI_Finalize();
  return status;
}
