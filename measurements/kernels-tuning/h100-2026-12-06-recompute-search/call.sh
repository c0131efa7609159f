# Call, after ../cpu-2026-12-06-next-calls/setup-calls.sh; carry [".whl", ".carry"]. The recompute kernel searched
# on this GPU at 16 heads (the served buckets), into a copy of the shipped configs; then the prefill bench at 16
# heads reading that copy; then the 8-head buckets with what time is left. Files written per bucket.
set -u
source measurements/kernels-tuning/cpu-2026-12-06-next-calls/preamble.sh
sku=$(python3 -P -c "import torch, kdakit.kernels.tuned as t; print(t.sku_of(torch.cuda.get_device_name()))")
echo "sku=$sku" >> $OUT/r/times.txt
cp -r kernels/configs $OUT/r/configs
timeout 260 .carry/calls/kd kernels autotune --sku $sku --kernels prefill-recompute --heads 16 \
  --tokens 4096,8192,512,16 --budget-seconds 30 --out $OUT/r/configs > $OUT/r/autotune-h16.log 2>&1
echo "autotune h16 rc=$? t=$SECONDS" >> $OUT/r/times.txt
KDAKIT_KERNEL_CONFIG_DIR=$OUT/r/configs timeout 170 .carry/calls/kd kernels bench --phases prefill --repeats 2 \
  --heads 16 --results-dir $OUT/r/bench-h16 --run-id vm > $OUT/r/bench-h16.log 2>&1
echo "bench h16 rc=$? t=$SECONDS" >> $OUT/r/times.txt
timeout $(( 585 - SECONDS )) .carry/calls/kd kernels autotune --sku $sku --kernels prefill-recompute --heads 8 \
  --tokens 4096,8192,512,16 --budget-seconds 30 --out $OUT/r/configs > $OUT/r/autotune-h8.log 2>&1
echo "autotune h8 rc=$? t=$SECONDS" >> $OUT/r/times.txt
finish
