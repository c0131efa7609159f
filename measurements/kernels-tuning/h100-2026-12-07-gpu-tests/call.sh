# Call, after setup-calls.sh; carry [".whl", ".carry"]. The GPU tests of the prefill, correctness only, three
# pytest processes side by side: test_prefill_gpu, and the lifecycle through SGLang's KDAAttnBackend for the triton
# and kdakit arms, one process per served case. Logs and junit files written as tests finish.
set -u
source measurements/kernels-tuning/cpu-2026-12-06-next-calls/preamble.sh
T=$(( 370 - SECONDS ))
P="python3 -P -m pytest -p kda_stubs -p no:cacheprovider -m gpu -v -rA --durations=10"
timeout $T $P tests/kernels/test_prefill_gpu.py --junitxml=$OUT/r/prefill-gpu.xml > $OUT/r/prefill-gpu.log 2>&1 & pids="$!"
for c in tp4-fp32-chain tp8-bf16-tree; do
  timeout $T $P tests/kernels/test_lifecycle_gpu.py -k "$c and not upstream" --junitxml=$OUT/r/lifecycle-$c.xml > $OUT/r/lifecycle-$c.log 2>&1 & pids="$pids $!"
done
wait $pids
echo "done t=$SECONDS" >> $OUT/r/times.txt
finish
