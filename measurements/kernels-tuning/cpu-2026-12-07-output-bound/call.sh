# Call, after setup-calls.sh; carry [".whl", ".carry"]. cprobe.py (../cpu-2026-12-05-state-fold/) at module
# defaults: main beside the state pass without its output (prefill_noout), with the output in a kernel of its
# own (prefill_split; prefill_split4 at 4 stages) and at 2 stages (prefill_s2), 1x4096 and 8x512 at 16 heads;
# then the GPU tests of ../cpu-2026-12-06-next-calls/gpu-tests.sh in the time left. Rows as they finish.
set -u
source measurements/kernels-tuning/cpu-2026-12-06-next-calls/preamble.sh
KDAKIT_KERNEL_CONFIGS=default timeout 260 python3 -P .carry/calls/cprobe.py "1x4096:16,8x512:16" \
  $OUT/r/bound.jsonl main,prefill_noout,prefill_split,prefill_split4,prefill_s2 > $OUT/r/cprobe.log 2>&1
echo "cprobe rc=$? t=$SECONDS" >> $OUT/r/times.txt
T=$(( ${CALL_LIMIT:-585} - SECONDS ))
P="python3 -P -m pytest -p kda_stubs -p no:cacheprovider -m gpu -v -rA --durations=10"
timeout $T $P tests/kernels/test_prefill_gpu.py --junitxml=$OUT/r/prefill-gpu.xml > $OUT/r/prefill-gpu.log 2>&1 &
pids="$!"
for c in tp4-fp32-chain tp8-bf16-tree; do
  timeout $T $P tests/kernels/test_lifecycle_gpu.py -k "$c and not upstream" --junitxml=$OUT/r/lifecycle-$c.xml \
    > $OUT/r/lifecycle-$c.log 2>&1 &
  pids="$pids $!"
done
wait $pids
echo "tests done t=$SECONDS" >> $OUT/r/times.txt
finish
