# A/B: this build, this build without coop2's fused dbias (expA), the earlier build.
set -u
un() { python3 -c "import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],'wb'))" "$1.bin.xz" "$1"; chmod +x "$1"; }
un .gpu/tidepool; un .gpu/expA/tidepool; un .gpu/against/tidepool
source .gpu/prelude.sh > $OUT/ab.err 2>&1
c=data/tinyshakespeare.txt
for r in 1 2 3; do for b in .gpu .gpu/expA .gpu/against; do
  echo "== $b $r" >&2
  timeout 120 $b/tidepool bench step --presets shakespeare --precision f16 --at-once 1 --warmup 3 --steps 20 --corpus $c --json | sed "s|^|$b $r |"
done; done > $OUT/ab-step.jsonl 2>>$OUT/ab.err
for b in .gpu .gpu/expA .gpu/against; do
  echo "== $b" >&2
  timeout 120 $b/tidepool bench kernels --presets shakespeare --precision f16 --warmup 3 --steps 10 --corpus $c --json | sed "s|^|$b |"
done > $OUT/ab-kernels.jsonl 2>>$OUT/ab.err
