# Call (planned, not run), after setup-calls.sh; carry [".whl", ".carry"]. The variant against fp64 and main
# (fold_err: bit-identical to main expected), then timed beside main, each at its module defaults.
set -u
mkdir -p $OUT/r
( while sleep 10; do tar czf $OUT/results.tgz -C $OUT r 2>/dev/null; done ) & packer=$!
source .carry/gpu-host/setup.sh > $OUT/r/setup.log 2>&1
export KDA_STUBS=sgl_kernel
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/r/env.txt
python3 -P -c "import torch, triton, importlib.metadata as m; print(torch.__version__, triton.__version__, m.version('helion'), m.version('sglang'), m.version('fla-core'))" >> $OUT/r/env.txt 2>&1
echo "setup t=$SECONDS" >> $OUT/r/times.txt
timeout 150 python3 -P .carry/calls/fold_err.py cuda prefill_tma > $OUT/r/fold_err.log 2>&1
echo "fold_err rc=$? t=$SECONDS" >> $OUT/r/times.txt
KDAKIT_KERNEL_CONFIGS=default timeout $(( 585 - SECONDS )) python3 -P .carry/calls/cprobe.py \
  "1x4096:16,2x4096:16,1x4096:8,8x512:16" $OUT/r/tma.jsonl main,prefill_tma > $OUT/r/cprobe.log 2>&1
echo "cprobe rc=$? t=$SECONDS" >> $OUT/r/times.txt
kill $packer; tar czf $OUT/results.tgz -C $OUT r
