# Call: intra and recompute searched (seeds timed beside) at 16 heads, 4096 then 512 tokens, into a copy of the
# configs for this card's SKU; then served prefill with them. Rows written as they finish.
set -u
mkdir -p $OUT/r
( while sleep 10; do tar czf $OUT/results.tgz -C $OUT r 2>/dev/null; done ) & packer=$!
source .carry/gpu-host/setup.sh > $OUT/r/setup.log 2>&1
export KDA_STUBS=sgl_kernel
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/r/env.txt
python3 -P -c "import torch, triton, importlib.metadata as m; print(torch.__version__, triton.__version__, m.version('helion'), m.version('sglang'))" >> $OUT/r/env.txt 2>&1
sku=$(python3 -P -c "import torch, kdakit.kernels.tuned as t; print(t.sku_of(torch.cuda.get_device_name()))")
echo "sku=$sku setup t=$SECONDS" >> $OUT/r/times.txt
cp -r kernels/configs $OUT/r/configs
timeout 330 .carry/calls/kd kernels autotune --sku $sku --kernels prefill-intra,prefill-recompute --heads 16 --tokens ${TOKENS:-4096,512} --budget-seconds ${BUDGET:-40} --out $OUT/r/configs > $OUT/r/autotune.log 2>&1
echo "autotune rc=$? t=$SECONDS" >> $OUT/r/times.txt
KDAKIT_KERNEL_CONFIG_DIR=$OUT/r/configs timeout $(( 585 - SECONDS )) .carry/calls/kd kernels served --arms helion,triton --reps 3 --stack-cases 1x4096 --results-dir $OUT/r/served --run-id vm > $OUT/r/served.log 2>&1
echo "served rc=$? t=$SECONDS" >> $OUT/r/times.txt
kill $packer; tar czf $OUT/results.tgz -C $OUT r
