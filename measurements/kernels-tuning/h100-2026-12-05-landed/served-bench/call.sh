# Call: main with the merged recompute's H200 configs (in the .whl): the prefill kernel bench at 16 heads with
# every arm (FLA included), then the prefill GPU tests (fp64, SGLang's Triton, tracking, graphs, extreme decay,
# a fresh process). Records written as rows finish.
set -u
mkdir -p $OUT/r
( while sleep 10; do tar czf $OUT/results.tgz -C $OUT r 2>/dev/null; done ) & packer=$!
source .carry/gpu-host/setup.sh > $OUT/r/setup.log 2>&1
export KDA_STUBS=sgl_kernel PYTHONSAFEPATH=1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/r/env.txt
nvidia-smi > $OUT/r/nvidia-smi.txt
python3 -P -c "import torch, triton, importlib.metadata as m, kdakit.kernels.prefill as p; print(torch.__version__, triton.__version__, m.version('helion'), m.version('sglang'), m.version('fla-core'), p.__file__, list(p._FNS))" >> $OUT/r/env.txt 2>&1
ls $(python3 -P -c "import kdakit.kernels.tuned as t; print(t.CONFIG_DIR)")/h200 | grep -c recompute >> $OUT/r/env.txt
echo "setup t=$SECONDS" >> $OUT/r/times.txt
timeout 260 .carry/calls/kd kernels bench --phases prefill --repeats 2 --results-dir $OUT/r/h16 --run-id vm > $OUT/r/bench-h16.log 2>&1
echo "bench-h16 rc=$? t=$SECONDS" >> $OUT/r/times.txt
timeout $(( 580 - SECONDS )) python3 -P -m pytest -p kda_stubs -p no:cacheprovider -m gpu -v -rA --durations=10 tests/kernels/test_prefill_gpu.py --junitxml=$OUT/r/prefill-gpu.xml > $OUT/r/prefill-gpu.log 2>&1
echo "prefill-gpu rc=$? t=$SECONDS" >> $OUT/r/times.txt
kill $packer; tar czf $OUT/results.tgz -C $OUT r
