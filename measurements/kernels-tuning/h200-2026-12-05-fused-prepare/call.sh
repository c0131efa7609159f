# Call (one machine, scarce): the fused prepare kernel (its wheel in .carry/fused) against main's chunk_kda in
# one process (output and state differences, per-kernel µs), then served prefill and the prefill kernel bench
# with it; records written as rows finish.
set -u
mkdir -p $OUT/r
( while sleep 10; do tar czf $OUT/results.tgz -C $OUT r 2>/dev/null; done ) & packer=$!
source .carry/gpu-host/setup.sh > $OUT/r/setup.log 2>&1
export KDA_STUBS=sgl_kernel
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site-fused .carry/fused/kdakit-*.whl >> $OUT/r/setup.log 2>&1
export PYTHONPATH="/tmp/site-fused:$PYTHONPATH"
K=.carry/calls/kd
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/r/env.txt
nvidia-smi > $OUT/r/nvidia-smi.txt
python3 -P -c "import torch, triton, importlib.metadata as m, kdakit.kernels.prefill as p; print(torch.__version__, triton.__version__, m.version('helion'), m.version('sglang'), m.version('fla-core'), p.__file__, 'prepare' in p._FNS)" >> $OUT/r/env.txt 2>&1
echo "setup t=$SECONDS" >> $OUT/r/times.txt
timeout 120 python3 -P .carry/calls/qprobe.py "1x4096:16,8x512:16,1x4096:8" $OUT/r/fused_vs_main.jsonl > $OUT/r/fused_vs_main.log 2>&1
echo "qprobe rc=$? t=$SECONDS" >> $OUT/r/times.txt
timeout 300 $K kernels served --arms helion,triton --reps 3 --results-dir $OUT/r/served --run-id vm > $OUT/r/served.log 2>&1
echo "served rc=$? t=$SECONDS" >> $OUT/r/times.txt
left=$(( 555 - SECONDS ))
[ $left -gt 60 ] && timeout $left $K kernels bench --phases prefill --repeats 2 --results-dir $OUT/r/h16 --run-id vm > $OUT/r/bench-h16.log 2>&1
echo "bench rc=$? t=$SECONDS" >> $OUT/r/times.txt
kill $packer; tar czf $OUT/results.tgz -C $OUT r
