# Call (planned, not run), after a variant is adopted on main and bundle.sh has run again: the changed
# kernels' H200 files searched again into a copy of kernels/configs/ (16 heads at every bucket, served prefill
# with those files, then 8 heads while time is left). KERNELS: the kernels whose source changed (the folds
# change recompute; the gate variants, gate). Files are written per bucket, rows as they finish.
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
timeout 300 .carry/calls/kd kernels autotune --sku $sku --kernels ${KERNELS:-prefill-recompute} --heads 16 \
  --tokens 4096,512,8192,16 --budget-seconds 30 --out $OUT/r/configs > $OUT/r/autotune-h16.log 2>&1
echo "autotune h16 rc=$? t=$SECONDS" >> $OUT/r/times.txt
KDAKIT_KERNEL_CONFIG_DIR=$OUT/r/configs timeout 160 .carry/calls/kd kernels served --arms helion,triton --reps 3 \
  --results-dir $OUT/r/served --run-id vm > $OUT/r/served.log 2>&1
echo "served rc=$? t=$SECONDS" >> $OUT/r/times.txt
timeout $(( 585 - SECONDS )) .carry/calls/kd kernels autotune --sku $sku --kernels ${KERNELS:-prefill-recompute} \
  --heads 8 --tokens 4096,512,8192,16 --budget-seconds 30 --out $OUT/r/configs > $OUT/r/autotune-h8.log 2>&1
echo "autotune h8 rc=$? t=$SECONDS" >> $OUT/r/times.txt
kill $packer; tar czf $OUT/results.tgz -C $OUT r
