# Call: on an H200, c18 (merged vs old per kernel; the merged recompute's search at every bucket; served with
# those configs). On any other GPU: the five prefill kernels searched for that GPU's own SKU folder at 16 heads
# and the served buckets 512 and 4096, then served prefill with those configs (kdakit tuned vs SGLang's Triton
# on that card). Rows written as they finish.
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
sku=$(python3 -P -c "import torch, kdakit.kernels.tuned as t; print(t.sku_of(torch.cuda.get_device_name()))")
echo "sku=$sku setup t=$SECONDS" >> $OUT/r/times.txt
cp -r kernels/configs $OUT/r/configs
timeout 250 .carry/calls/kd kernels autotune --sku $sku --kernels prefill --heads 16 --tokens 512,4096 --budget-seconds 2 --out $OUT/r/configs > $OUT/r/autotune.log 2>&1
echo "autotune rc=$? t=$SECONDS" >> $OUT/r/times.txt
KDAKIT_KERNEL_CONFIG_DIR=$OUT/r/configs timeout $(( 580 - SECONDS )) .carry/calls/kd kernels served --arms helion,triton --reps 3 --results-dir $OUT/r/served --run-id vm > $OUT/r/served.log 2>&1
echo "served rc=$? t=$SECONDS" >> $OUT/r/times.txt
kill $packer; tar czf $OUT/results.tgz -C $OUT r
