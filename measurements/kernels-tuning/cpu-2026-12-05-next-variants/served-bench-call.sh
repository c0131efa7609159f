# Call (planned, not run): served prefill of main with the shipped configs, then the prefill bench with every
# arm (FLA included) at 16 and 8 heads. Same setup as next-call.sh.
set -u
mkdir -p $OUT/r
( while sleep 10; do tar czf $OUT/results.tgz -C $OUT r 2>/dev/null; done ) & packer=$!
source .carry/gpu-host/setup.sh > $OUT/r/setup.log 2>&1
export KDA_STUBS=sgl_kernel
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/r/env.txt
python3 -P -c "import torch, triton, importlib.metadata as m; print(torch.__version__, triton.__version__, m.version('helion'), m.version('sglang'), m.version('fla-core'))" >> $OUT/r/env.txt 2>&1
echo "setup t=$SECONDS" >> $OUT/r/times.txt
timeout 130 .carry/calls/kd kernels served --arms helion,triton --reps 3 --results-dir $OUT/r/served --run-id vm > $OUT/r/served.log 2>&1
echo "served rc=$? t=$SECONDS" >> $OUT/r/times.txt
timeout 200 .carry/calls/kd kernels bench --phases prefill --repeats 2 --results-dir $OUT/r/bench --run-id vm > $OUT/r/bench.log 2>&1
echo "bench rc=$? t=$SECONDS" >> $OUT/r/times.txt
timeout $(( 575 - SECONDS )) .carry/calls/kd kernels bench --phases prefill --repeats 2 --heads 8 --results-dir $OUT/r/bench-h8 --run-id vm > $OUT/r/bench-h8.log 2>&1
echo "bench-h8 rc=$? t=$SECONDS" >> $OUT/r/times.txt
kill $packer; tar czf $OUT/results.tgz -C $OUT r
