# How this folder was made (an H100, not the H200: compare builds within it only).
# At 5a4e3f4 (main then): `scripts/gpu-pack.sh --no-browser
#   --candidate C=candidate/vec4-epilogue:matmul_f16 --candidate DF=candidate/attention-prefetch-both
#   --candidate E=candidate/layernorm-held --candidate G=candidate/subgroup-flush:matmul_f16
#   --candidate H=candidate/coop-packed-stash:matmul_f16 --candidate I=candidate/coop-loads-two-ahead:matmul_f16
#   --candidate GHI=candidate/coop2-all:matmul_f16`, then on the GPU machine
#   `ROUNDS=2 bash scripts/gpu-ab.sh` (ab.md, ab.jsonl, ab.log, tests-*-*.txt; its budget
#   skipped H's and I's tests, the probes and the kernels), then on the same warm machine
#   H's and I's matmul_f16 (`--skip emulated`: tests-H.txt, tests-I.txt), `.gpu/gemm_ceiling
#   --json` (probes.txt) and `tidepool bench kernels --presets shakespeare --precision f32,f16
#   --warmup 3 --steps 10` of this, C, E and GHI (kernels-*.txt); sum.txt: their exit codes.
#   C   25cb48c: GEMM forward and dinp epilogues read and write 4 columns a vec4
#   DF  6f0be8a: attention forward and backward load each tile a tile ahead
#   E   0d2b9b5: layernorm rows held in registers, a subgroup a row
#   G   71ac47e: coop2's output staging at subgroup barriers
#   H   ed31852: coop2's tiles as vec4<f16>, one store a put
#   I   21e9cb8: coop2's loads issued two steps ahead
#   GHI cb26fc8: G, H and I merged
