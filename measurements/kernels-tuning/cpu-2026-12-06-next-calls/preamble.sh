# Sourced first by this folder's calls, from the repository root: $OUT/r, packed into $OUT/results.tgz every
# 10 s (a call cut short still brings its rows back), the GPU host's set-up, the GPU and the versions that ran
# in env.txt. `finish` packs the last time.
mkdir -p $OUT/r
( while sleep 10; do tar czf $OUT/results.tgz -C $OUT r 2>/dev/null; done ) & packer=$!
source .carry/gpu-host/setup.sh > $OUT/r/setup.log 2>&1
export KDA_STUBS=sgl_kernel PYTHONSAFEPATH=1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/r/env.txt
nvidia-smi > $OUT/r/nvidia-smi.txt
python3 -P -c "import torch, triton, importlib.metadata as m, kdakit.kernels.prefill as p; print(torch.__version__, triton.__version__, m.version('helion'), m.version('sglang'), m.version('fla-core'), p.__file__, '_EXP2_ONCE' in dir(p))" >> $OUT/r/env.txt 2>&1
echo "setup t=$SECONDS" >> $OUT/r/times.txt
finish() { kill $packer; tar czf $OUT/results.tgz -C $OUT r; }
