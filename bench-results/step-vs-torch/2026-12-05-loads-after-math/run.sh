# How this folder was made: `scripts/gpu-pack.sh --candidate A=f764765 --candidate B=f12ae6f`
# at 5ac785b (main then), then on the H200: `bash scripts/gpu-ab.sh` (ROUNDS=3).
#   this  5ac785b: the dweight cores add dbias sums as the loads are issued (tiled),
#         coop2 leaves dbias to column sums; GELU applied inside load_a / load_b
#   A     f764765 (on main as 3a454ac): dbias sums added where the loads are stored,
#         after the step's math; coop2 sums dbias again
#   B     f12ae6f (on main as c432db5): A, and the GELU prologue applied as the loads
#         are stored (prologue_a / prologue_b in put_a / put_b)
# ab.md: the step's median ms a build and round (f32, f16), and `bench kernels` of each;
# ab.jsonl: every JSON line, led by "build" and "round"; tests-*.txt: each candidate's
# f16 GEMM tests (matmul_f16) on the tensor cores; ab.log: the commands in order.
