# Call (planned, not run): main, the fold, the two combinations and the six variants of
# ../cpu-2026-12-05-next-variants/ per kernel, at module defaults, then the fold's error against fp64 on the
# GPU. Replaces that folder's next-call.sh (cprobe reports each arm's difference from main, which covers
# hoist_cmp's bit-identity check of the whole call). Set-up on the CPU first: `bash setup-calls.sh` (this
# folder), from the repository root. Carry [".whl", ".carry"].
set -u
mkdir -p $OUT/r
( while sleep 10; do tar czf $OUT/results.tgz -C $OUT r 2>/dev/null; done ) & packer=$!
source .carry/gpu-host/setup.sh > $OUT/r/setup.log 2>&1
export KDA_STUBS=sgl_kernel
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/r/env.txt
python3 -P -c "import torch, triton, importlib.metadata as m; print(torch.__version__, triton.__version__, m.version('helion'), m.version('sglang'), m.version('fla-core'))" >> $OUT/r/env.txt 2>&1
echo "setup t=$SECONDS" >> $OUT/r/times.txt
KDAKIT_KERNEL_CONFIGS=default timeout $(( 480 - SECONDS )) python3 -P .carry/calls/cprobe.py \
  "1x4096:16,8x512:16,1x4096:8" $OUT/r/variants.jsonl \
  main,prefill_fold,prefill_all_1,prefill_all_2,prefill_hoist,prefill_state2,prefill_state1,prefill_gate1,prefill_gate2,prefill_rmin \
  > $OUT/r/cprobe.log 2>&1
echo "cprobe rc=$? t=$SECONDS" >> $OUT/r/times.txt
KDAKIT_KERNEL_CONFIGS=default timeout $(( 585 - SECONDS )) python3 -P .carry/calls/fold_err.py cuda > $OUT/r/fold_err.log 2>&1
echo "fold_err rc=$? t=$SECONDS" >> $OUT/r/times.txt
kill $packer; tar czf $OUT/results.tgz -C $OUT r
