# Call: every GPU test of the kit on main's kernels, in four pytest processes side by side (correctness only:
# no timing runs in this call).
set -u
mkdir -p $OUT/r
( while sleep 15; do tar czf $OUT/results.tgz -C $OUT r 2>/dev/null; done ) & packer=$!
source .carry/gpu-host/setup.sh > $OUT/r/setup.log 2>&1
export KDA_STUBS=sgl_kernel
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/r/env.txt
python3 -c "import torch, triton, importlib.metadata as m; print(torch.__version__, triton.__version__, m.version('helion'), m.version('sglang'))" >> $OUT/r/env.txt 2>&1
T=$1
P="python3 -P -m pytest -p kda_stubs -p no:cacheprovider -m gpu -q -rA --durations=20"
timeout $T $P tests/kernels/test_lifecycle_gpu.py -k "not upstream" --junitxml=$OUT/r/lifecycle-helion.xml > $OUT/r/lifecycle-helion.log 2>&1 & pids="$!"
timeout $T $P tests/kernels/test_lifecycle_gpu.py -k "upstream" --junitxml=$OUT/r/lifecycle-upstream.xml > $OUT/r/lifecycle-upstream.log 2>&1 & pids="$pids $!"
timeout $T $P tests/kernels/test_prefill_gpu.py --junitxml=$OUT/r/prefill.xml > $OUT/r/prefill.log 2>&1 & pids="$pids $!"
timeout $T $P tests --ignore=tests/kernels/test_lifecycle_gpu.py --ignore=tests/kernels/test_prefill_gpu.py --junitxml=$OUT/r/rest.xml > $OUT/r/rest.log 2>&1 & pids="$pids $!"
wait $pids
echo "done t=$SECONDS" >> $OUT/r/times.txt
kill $packer; tar czf $OUT/results.tgz -C $OUT r
