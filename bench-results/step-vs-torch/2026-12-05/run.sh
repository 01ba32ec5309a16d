# The default step against the build before, the browser build against native, the
# f16 GEMM tests on the GPU.
OUT0=$OUT
OUT=$OUT0/s STEP_QUICK=1 REPEATS=2 bash scripts/gpu-run.sh --against .gpu/against step-vs-torch > /dev/null 2>&1
( source .gpu/prelude.sh > /dev/null 2>&1; timeout 100 .gpu/tests/matmul_f16 --test-threads 1 > $OUT0/matmul_f16.txt 2>&1 )
OUT=$OUT0/b REPEATS=2 RUN_SECONDS=120 bash scripts/gpu-run.sh browser-vs-native > /dev/null 2>&1
rm -f $OUT0/b/info.txt
