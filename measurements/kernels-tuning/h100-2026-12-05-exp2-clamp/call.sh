# Call: intra's exp2 clamp as one Triton clamp (main) against the torch.clamp form (prefill_old) and an
# upper-bound-only variant, per kernel at module defaults; then served prefill at 1x4096 with main.
set -u
mkdir -p $OUT/r
( while sleep 10; do tar czf $OUT/results.tgz -C $OUT r 2>/dev/null; done ) & packer=$!
source .carry/gpu-host/setup.sh > $OUT/r/setup.log 2>&1
export KDA_STUBS=sgl_kernel
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/r/env.txt
echo "setup t=$SECONDS" >> $OUT/r/times.txt
KDAKIT_KERNEL_CONFIGS=default timeout 150 python3 -P .carry/calls/cprobe.py "1x4096:16,8x512:16,1x4096:8" $OUT/r/clamp.jsonl prefill_old,main,prefill_upper > $OUT/r/cprobe.log 2>&1
echo "cprobe rc=$? t=$SECONDS" >> $OUT/r/times.txt
timeout $(( ${LIMIT:-380} - SECONDS )) .carry/calls/kd kernels served --arms helion,triton --reps 3 --layer-cases 1x512,1x4096 --stack-cases 1x4096 --results-dir $OUT/r/served --run-id vm > $OUT/r/served.log 2>&1
echo "served rc=$? t=$SECONDS" >> $OUT/r/times.txt
kill $packer; tar czf $OUT/results.tgz -C $OUT r
