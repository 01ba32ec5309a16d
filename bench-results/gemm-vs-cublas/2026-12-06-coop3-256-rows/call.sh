#!/usr/bin/env bash
set -u
cd "$(dirname "$0")/.."
source .gpu/prelude.sh
O=${OUT:?}
mkdir -p "$O"
unpack() { python3 -c "import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],'wb'))" "$1" "$2"; chmod +x "$2"; }
unpack .gpu/matmul_bench.bin.xz /tmp/mb
unpack .gpu/against/matmul_bench.bin.xz /tmp/mb2
unpack .gpu/tests/matmul_f16.bin.xz /tmp/mf16
unpack .gpu/kernel_stats.bin.xz /tmp/ks
TIDEPOOL_F16_CORE=coop3 timeout 150 /tmp/mf16 --test-threads=1 > "$O/tests-coop3.txt" 2>&1; echo "rc $?" >> "$O/tests-coop3.txt"
tail -3 "$O/tests-coop3.txt"
timeout 60 /tmp/ks coop3 coop2 > "$O/ks-this.txt" 2>&1
timeout 60 /tmp/ks zzzz .gpu/c3a2-wgsl/*.wgsl > "$O/ks-ahead2.txt" 2>&1
for r in 1 2; do
  timeout 90 /tmp/mb --no-squares --only matmul --variant coop2,coop3,coop3-splitk --budget-ms 200 --json > "$O/this-$r.txt" 2>&1
  timeout 90 /tmp/mb2 --no-squares --only matmul --variant coop3 --budget-ms 200 --json > "$O/ahead2-$r.txt" 2>&1
done
grep -v '^{' "$O/this-1.txt" | head -60
grep -v '^{' "$O/ahead2-1.txt" | head -30
grep -i -E "coop|name" "$O/ks-this.txt" "$O/ks-ahead2.txt" | head -30
