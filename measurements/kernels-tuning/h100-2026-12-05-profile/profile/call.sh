# Call: on an H200, c18. On any other GPU: the per-kernel profile of main (five prefill kernels, merged
# recompute) beside SGLang's Triton, SGLang's Helion and FLA, at 1x4096 and 8x512 (16 heads) and 1x4096 (8
# heads), then the same cases with main before the merge in one process (qprobe). Rows written as they finish.
set -u
mkdir -p $OUT/r
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "$name" > $OUT/r/gpu.txt
case "$name" in
  *H200*) exec bash .carry/calls/c18.sh ;;
esac
( while sleep 10; do tar czf $OUT/results.tgz -C $OUT r 2>/dev/null; done ) & packer=$!
source .carry/gpu-host/setup.sh > $OUT/r/setup.log 2>&1
export KDA_STUBS=sgl_kernel
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/r/env.txt
nvidia-smi > $OUT/r/nvidia-smi.txt
python3 -P -c "import torch, triton, importlib.metadata as m, kdakit.kernels.prefill as p; print(torch.__version__, triton.__version__, m.version('helion'), m.version('sglang'), m.version('fla-core'), p.__file__, list(p._FNS))" >> $OUT/r/env.txt 2>&1
echo "setup t=$SECONDS" >> $OUT/r/times.txt
timeout 330 .carry/calls/kd kernels profile --calls 10 --cases 1x4096:16,8x512:16,1x4096:8 --results-dir $OUT/r/profile --run-id vm > $OUT/r/profile.log 2>&1
echo "profile rc=$? t=$SECONDS" >> $OUT/r/times.txt
timeout $(( 560 - SECONDS )) python3 -P .carry/calls/qprobe.py "1x4096:16,8x512:16,1x4096:8" $OUT/r/merged_vs_old.jsonl > $OUT/r/merged_vs_old.log 2>&1
echo "qprobe rc=$? t=$SECONDS" >> $OUT/r/times.txt
kill $packer; tar czf $OUT/results.tgz -C $OUT r
