# Call: the merged recompute searched at its remaining buckets (16 heads: 16, 512, 8192 tokens; 8 heads: all
# four), into a copy of the configs that already holds the 16-head 4096-token search. Files written per bucket.
set -u
mkdir -p $OUT/r
( while sleep 10; do tar czf $OUT/results.tgz -C $OUT r 2>/dev/null; done ) & packer=$!
source .carry/gpu-host/setup.sh > $OUT/r/setup.log 2>&1
export KDA_STUBS=sgl_kernel
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/r/env.txt
sku=$(python3 -P -c "import torch, kdakit.kernels.tuned as t; print(t.sku_of(torch.cuda.get_device_name()))")
echo "sku=$sku setup t=$SECONDS" >> $OUT/r/times.txt
cp -r .carry/calls/configs_new $OUT/r/configs
timeout 280 .carry/calls/kd kernels autotune --sku $sku --kernels prefill-recompute --heads 16 --tokens 512,8192,16 --budget-seconds 30 --out $OUT/r/configs > $OUT/r/autotune-h16.log 2>&1
echo "autotune h16 rc=$? t=$SECONDS" >> $OUT/r/times.txt
timeout $(( 560 - SECONDS )) .carry/calls/kd kernels autotune --sku $sku --kernels prefill-recompute --heads 8 --tokens 4096,512,8192,16 --budget-seconds 30 --out $OUT/r/configs > $OUT/r/autotune-h8.log 2>&1
echo "autotune h8 rc=$? t=$SECONDS" >> $OUT/r/times.txt
kill $packer; tar czf $OUT/results.tgz -C $OUT r
