# Call (planned, not run): the four variants against main per kernel, bit-identity of the intra variant on the
# GPU, then served prefill and the prefill bench (with FLA) of main. Setup on the CPU first:
#   bash ../shared/tools/gpu-host/bundle.sh
#   python3 -m pip download -q --no-deps --only-binary=:all: -d .whl fla-core==0.6.0 einops==0.8.2
#   mkdir -p .carry/calls && D=measurements/kernels-tuning/cpu-2026-12-05-next-variants
#   for v in hoist:intra-hoist rmin:recompute-minimum state1:state-pass-1 state2:state-pass-2; do cp kernels/prefill.py .carry/calls/prefill_${v%%:*}.py
#     patch .carry/calls/prefill_${v%%:*}.py < $D/${v#*:}.diff; done
#   cp $D/hoist_cmp.py measurements/kernels-tuning/h100-2026-12-05-exp2-clamp/cprobe.py .carry/calls/
# and .carry/calls/kd as in the earlier call scripts. Carry [".whl", ".carry"].
set -u
mkdir -p $OUT/r
( while sleep 10; do tar czf $OUT/results.tgz -C $OUT r 2>/dev/null; done ) & packer=$!
source .carry/gpu-host/setup.sh > $OUT/r/setup.log 2>&1
export KDA_STUBS=sgl_kernel
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/r/env.txt
python3 -P -c "import torch, triton, importlib.metadata as m; print(torch.__version__, triton.__version__, m.version('helion'), m.version('sglang'), m.version('fla-core'))" >> $OUT/r/env.txt 2>&1
echo "setup t=$SECONDS" >> $OUT/r/times.txt
timeout 90 python3 -P .carry/calls/hoist_cmp.py cuda > $OUT/r/cmp.log 2>&1
echo "cmp rc=$? t=$SECONDS" >> $OUT/r/times.txt
KDAKIT_KERNEL_CONFIGS=default timeout 220 python3 -P .carry/calls/cprobe.py "1x4096:16,8x512:16,1x4096:8" \
  $OUT/r/variants.jsonl main,prefill_hoist,prefill_rmin,prefill_state1,prefill_state2 > $OUT/r/cprobe.log 2>&1
echo "cprobe rc=$? t=$SECONDS" >> $OUT/r/times.txt
timeout 120 .carry/calls/kd kernels served --arms helion,triton --reps 3 --results-dir $OUT/r/served --run-id vm > $OUT/r/served.log 2>&1
echo "served rc=$? t=$SECONDS" >> $OUT/r/times.txt
timeout $(( 570 - SECONDS )) .carry/calls/kd kernels bench --phases prefill --repeats 2 --results-dir $OUT/r/bench --run-id vm > $OUT/r/bench.log 2>&1
echo "bench rc=$? t=$SECONDS" >> $OUT/r/times.txt
kill $packer; tar czf $OUT/results.tgz -C $OUT r
