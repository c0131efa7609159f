# Call: served prefill (kdakit vs SGLang's Triton) with the shipped H200 configs, now holding the merged
# recompute's searched configs; then the prefill kernel bench at 16 heads with every arm in the time left.
set -u
mkdir -p $OUT/r
( while sleep 10; do tar czf $OUT/results.tgz -C $OUT r 2>/dev/null; done ) & packer=$!
source .carry/gpu-host/setup.sh > $OUT/r/setup.log 2>&1
export KDA_STUBS=sgl_kernel
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/r/env.txt
nvidia-smi > $OUT/r/nvidia-smi.txt
python3 -P -c "import torch, triton, importlib.metadata as m; print(torch.__version__, triton.__version__, m.version('helion'), m.version('sglang'), m.version('fla-core'))" >> $OUT/r/env.txt 2>&1
echo "setup t=$SECONDS" >> $OUT/r/times.txt
timeout 280 .carry/calls/kd kernels served --arms helion,triton --reps 3 --results-dir $OUT/r/served --run-id vm > $OUT/r/served.log 2>&1
echo "served rc=$? t=$SECONDS" >> $OUT/r/times.txt
timeout $(( ${LIMIT:-560} - SECONDS )) .carry/calls/kd kernels bench --phases prefill --repeats 2 --results-dir $OUT/r/bench --run-id vm > $OUT/r/bench.log 2>&1
echo "bench rc=$? t=$SECONDS" >> $OUT/r/times.txt
kill $packer; tar czf $OUT/results.tgz -C $OUT r
