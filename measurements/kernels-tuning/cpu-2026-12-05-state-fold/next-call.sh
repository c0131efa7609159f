# Call (planned, not run): per kernel at module defaults, main against the folds, the two combinations
# and the variants of ../cpu-2026-12-05-next-variants/ (arms most important first: a cut loses the last
# ones); then, in a process of its own (a failing TMA copy would take the CUDA context with it), main against
# the fold whose state pass reads its operands by TMA; then the folds' error against fp64 on the GPU.
# Replaces that folder's next-call.sh: cprobe reports each arm's difference from main, which covers
# hoist_cmp's check of the call. Set-up on the CPU first: `bash setup-calls.sh` (this folder), from the
# repository root. Carry [".whl", ".carry"].
set -u
mkdir -p $OUT/r
( while sleep 10; do tar czf $OUT/results.tgz -C $OUT r 2>/dev/null; done ) & packer=$!
source .carry/gpu-host/setup.sh > $OUT/r/setup.log 2>&1
export KDA_STUBS=sgl_kernel KDAKIT_KERNEL_CONFIGS=default
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/r/env.txt
python3 -P -c "import torch, triton, importlib.metadata as m; print(torch.__version__, triton.__version__, m.version('helion'), m.version('sglang'), m.version('fla-core'))" >> $OUT/r/env.txt 2>&1
echo "setup t=$SECONDS" >> $OUT/r/times.txt
timeout $(( 420 - SECONDS )) python3 -P .carry/calls/cprobe.py "1x4096:16,8x512:16,1x4096:8" $OUT/r/variants.jsonl \
  main,prefill_foldt,prefill_fold,prefill_all_1,prefill_all_2,prefill_hoist,prefill_gate1,prefill_gate2,prefill_state2 \
  > $OUT/r/cprobe.log 2>&1
echo "cprobe rc=$? t=$SECONDS" >> $OUT/r/times.txt
timeout $(( 500 - SECONDS )) python3 -P .carry/calls/cprobe.py "1x4096:16,8x512:16" $OUT/r/variants-tma.jsonl \
  main,prefill_foldtma > $OUT/r/cprobe-tma.log 2>&1
echo "cprobe-tma rc=$? t=$SECONDS" >> $OUT/r/times.txt
timeout $(( 585 - SECONDS )) python3 -P .carry/calls/fold_err.py cuda prefill_foldt,prefill_fold > $OUT/r/fold_err.log 2>&1
echo "fold_err rc=$? t=$SECONDS" >> $OUT/r/times.txt
kill $packer; tar czf $OUT/results.tgz -C $OUT r
