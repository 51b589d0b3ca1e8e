"""Lane guards: the branches only some threads take, found in the source and stripped for a second compile
(the damage/ace layouts of gpuFLOPBench, written out here)."""

from __future__ import annotations

DAMAGE = """
__global__ void damage(const int n, const int* nlist, const int* family, double* damage) {
  const int local_id = threadIdx.x;
  const int nid = blockIdx.x;
  if (nid * blockDim.x + local_id >= n) return;
  for (int i = blockDim.x / 2; i > 0; i /= 2) {
    if (local_id == 0) { damage[nid] += 1.0; }
  }
  if (local_id == 0) {
    damage[nid] = 1.0 - (double) nlist[nid] / (double) family[nid];
  }
}
"""
BOUNDARY = """
#define NX 400
__global__ void boundary(double* u, double delta) {
  unsigned iz = blockIdx.x * blockDim.x + threadIdx.x;
  if (iz == 0) { u[iz] = -delta; }
  else if (iz == NX - 1) { u[iz] = -delta; }
  else if (iz < 7 && iz > 2) { u[iz] = delta * 2.0; }
}
"""


def _known(grid, block):
    from components.features.static.loops import Known

    return Known({}, {}, grid, block)


def test_a_thread_zero_tail_passes_one_thread_per_block_and_loops_are_left_alone():
    from components.features.static.guards import lane_guards

    (guard,) = lane_guards(DAMAGE, "damage", _known((1000, 1, 1), (256, 1, 1)))
    assert guard.condition == "local_id == 0" and guard.share == 1 / 256
    assert DAMAGE[guard.paren :].startswith("(local_id == 0) {\n    damage[nid] = 1.0 -")


def test_a_boundary_chain_passes_one_index_of_the_launch_per_branch():
    from components.features.static.guards import lane_guards, strip_lane_guards

    guards = lane_guards(BOUNDARY, "boundary", _known((50, 1, 1), (8, 1, 1)))
    assert [g.condition for g in guards] == ["iz == 0", "iz == NX - 1"]  # the && clause is not a lane guard
    assert all(g.share == 1 / 400 for g in guards)
    stripped = strip_lane_guards(BOUNDARY, guards)
    assert "if (0 && (iz == 0))" in stripped and "else if (0 && (iz == NX - 1))" in stripped
    assert "if (iz < 7 && iz > 2)" in stripped


def test_no_guard_without_a_thread_index_or_for_a_one_thread_extent():
    from components.features.static.guards import lane_guards

    assert lane_guards(DAMAGE, "damage", _known((1000, 1, 1), (1, 1, 1))) == []
    assert (
        lane_guards("__global__ void k(int n) { if (n == 0) { } }", "k", _known((4, 1, 1), (64, 1, 1))) == []
    )
