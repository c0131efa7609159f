# Call (planned, not run): the six variants against main per kernel (module defaults; the gate variants'
# own defaults), after a bit-identity check of the intra variant on the GPU. Then `served-bench-call.sh`.
# Setup on the CPU first:
#   bash ../shared/tools/gpu-host/bundle.sh
#   python3 -m pip download -q --no-deps --only-binary=:all: -d .whl fla-core==0.6.0 einops==0.8.2
#   mkdir -p .carry/calls && D=measurements/kernels-tuning/cpu-2026-12-05-next-variants
#   for v in hoist:intra-hoist rmin:recompute-minimum state1:state-pass-1 state2:state-pass-2 \
#            gate1:gate-1 gate2:gate-2; do cp kernels/prefill.py .carry/calls/prefill_${v%%:*}.py
#     patch .carry/calls/prefill_${v%%:*}.py < $D/${v#*:}.diff; done
#   cp $D/hoist_cmp.py measurements/kernels-tuning/h100-2026-12-05-exp2-clamp/cprobe.py .carry/calls/
# and .carry/calls/kd (executable), the kit's CLI with the host's stand-ins:
#   exec python3 -P -c "import kda_stubs, sys; from kdakit.cli import main; sys.argv=['kdakit']+sys.argv[1:]; sys.exit(main())" "$@"
# Carry [".whl", ".carry"].
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
KDAKIT_KERNEL_CONFIGS=default timeout $(( 570 - SECONDS )) python3 -P .carry/calls/cprobe.py \
  "1x4096:16,8x512:16,1x4096:8" $OUT/r/variants.jsonl \
  main,prefill_hoist,prefill_rmin,prefill_state1,prefill_state2,prefill_gate1,prefill_gate2 > $OUT/r/cprobe.log 2>&1
echo "cprobe rc=$? t=$SECONDS" >> $OUT/r/times.txt
kill $packer; tar czf $OUT/results.tgz -C $OUT r
