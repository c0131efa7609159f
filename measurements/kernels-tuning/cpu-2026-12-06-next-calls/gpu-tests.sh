# Call, after setup-calls.sh; carry [".whl", ".carry"]. The GPU tests of the prefill, correctness only, three
# pytest processes side by side: test_prefill_gpu, and the lifecycle through SGLang's KDAAttnBackend for the triton
# and kdakit arms, one process per served case. Logs and junit files written as tests finish.
set -u
mkdir -p $OUT/r
( while sleep 15; do tar czf $OUT/results.tgz -C $OUT r 2>/dev/null; done ) & packer=$!
source .carry/gpu-host/setup.sh > $OUT/r/setup.log 2>&1
export KDA_STUBS=sgl_kernel PYTHONSAFEPATH=1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/r/env.txt
nvidia-smi > $OUT/r/nvidia-smi.txt
python3 -P -c "import torch, triton, importlib.metadata as m, kdakit.kernels.prefill as p; print(torch.__version__, triton.__version__, m.version('helion'), m.version('sglang'), p.__file__, list(p._FNS))" >> $OUT/r/env.txt 2>&1
echo "setup t=$SECONDS" >> $OUT/r/times.txt
T=$(( 575 - SECONDS ))
P="python3 -P -m pytest -p kda_stubs -p no:cacheprovider -m gpu -v -rA --durations=10"
timeout $T $P tests/kernels/test_prefill_gpu.py --junitxml=$OUT/r/prefill-gpu.xml > $OUT/r/prefill-gpu.log 2>&1 & pids="$!"
for c in tp4-fp32-chain tp8-bf16-tree; do
  timeout $T $P tests/kernels/test_lifecycle_gpu.py -k "$c and not upstream" --junitxml=$OUT/r/lifecycle-$c.xml > $OUT/r/lifecycle-$c.log 2>&1 & pids="$pids $!"
done
wait $pids
echo "done t=$SECONDS" >> $OUT/r/times.txt
kill $packer; tar czf $OUT/results.tgz -C $OUT r
