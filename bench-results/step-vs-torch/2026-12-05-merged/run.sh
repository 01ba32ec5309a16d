# How this folder was made (H200): at 3ace14d (C, E and G+H+I merged on main),
# `scripts/gpu-pack.sh --no-browser --candidate before=5a4e3f4:matmul_f16`, then on the GPU
# machine, three rounds of `tidepool bench step --presets shakespeare --precision f32,f16
# --at-once 1 --warmup 3 --steps 20 --corpus data/tinyshakespeare.txt --json` for this build
# and `before` in turns (step.jsonl, each line led by build and round), then each build's
# `bench kernels --presets shakespeare --precision f32,f16 --warmup 3 --steps 10`
# (kernels-*.jsonl); err.log: their stderr.
