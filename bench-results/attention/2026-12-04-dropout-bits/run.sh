#!/usr/bin/env bash
# This build (the attention forward sharing its dropout bits) against 07aebc6: the
# step in turns, every kernel timed, PyTorch's step and peaks, the peaks of this
# build, and the attention and dropout tests on this GPU.
source .gpu/prelude.sh >/dev/null
unxz() { python3 -c "import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],'wb'))" "$1" "$2"; chmod +x "$2"; }
unxz .gpu/tidepool.bin.xz /tmp/tp_this; unxz .gpu/against/tidepool.bin.xz /tmp/tp_against
C=data/tinyshakespeare.txt
start=$SECONDS
for round in 1 2; do
  for b in this against; do
    timeout 60 /tmp/tp_$b bench step --presets shakespeare --precision f32,f16 --at-once 1 --warmup 3 --steps 20 --corpus $C --json 2>/dev/null | grep '^{' | sed "s/^/step $b $round: /"
  done
done > $OUT/step.txt
echo "steps done at $((SECONDS-start)) s"
for b in this against; do
  timeout 60 /tmp/tp_$b bench kernels --presets shakespeare --precision f32,f16 --warmup 5 --steps 10 --corpus $C --json 2>/dev/null | grep '^{' | sed "s/^/kernels $b: /"
done > $OUT/kernels.txt
echo "kernels done at $((SECONDS-start)) s"
unxz .gpu/tests/ops.bin.xz /tmp/ops 2>/dev/null || unxz .gpu/tests/ops.xz /tmp/ops
timeout 120 /tmp/ops --test-threads 1 attention dropout > $OUT/parity.txt 2>&1
echo "parity rc $? at $((SECONDS-start)) s"
tail -3 $OUT/parity.txt
