# Call, after setup-calls.sh; carry [".whl", ".carry"]. Served prefill (kdakit and SGLang's Triton in SGLang's
# prefill graph, per layer and the 34-layer stack), then the prefill bench with every arm; BENCH_HEADS (default
# 16) heads. Rows written as they finish.
set -u
mkdir -p $OUT/r
( while sleep 10; do tar czf $OUT/results.tgz -C $OUT r 2>/dev/null; done ) & packer=$!
source .carry/gpu-host/setup.sh > $OUT/r/setup.log 2>&1
export KDA_STUBS=sgl_kernel PYTHONSAFEPATH=1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/r/env.txt
nvidia-smi > $OUT/r/nvidia-smi.txt
python3 -P -c "import torch, triton, importlib.metadata as m, kdakit.kernels.prefill as p; print(torch.__version__, triton.__version__, m.version('helion'), m.version('sglang'), m.version('fla-core'), p.__file__, '_EXP2_ONCE' in dir(p))" >> $OUT/r/env.txt 2>&1
echo "setup t=$SECONDS" >> $OUT/r/times.txt
timeout 260 .carry/calls/kd kernels served --arms triton,helion --reps 3 --results-dir $OUT/r/served --run-id vm \
  > $OUT/r/served.log 2>&1
echo "served rc=$? t=$SECONDS" >> $OUT/r/times.txt
timeout $(( 580 - SECONDS )) .carry/calls/kd kernels bench --phases prefill --repeats 2 --heads ${BENCH_HEADS:-16} \
  --results-dir $OUT/r/bench --run-id vm > $OUT/r/bench.log 2>&1
echo "bench rc=$? t=$SECONDS" >> $OUT/r/times.txt
kill $packer; tar czf $OUT/results.tgz -C $OUT r
