# Call, after ../cpu-2026-12-06-next-calls/setup-calls.sh; carry [".whl", ".carry"]. The gate's configs searched
# on this GPU at the token buckets where the H100's search gained (16 and 512), 16 heads then 8, written into
# a copy of the shipped configs; then served prefill on that copy, so the layer shows what the files change.
set -u
source measurements/kernels-tuning/cpu-2026-12-06-next-calls/preamble.sh
sku=$(python3 -P -c "import torch, kdakit.kernels.tuned as t; print(t.sku_of(torch.cuda.get_device_name()))")
echo "sku=$sku" >> $OUT/r/times.txt
cp -r kernels/configs $OUT/r/configs
for h in 16 8; do
  timeout $(( (h == 16 ? 200 : 330) - SECONDS )) .carry/calls/kd kernels autotune --sku $sku \
    --kernels prefill-gate --heads $h --tokens 16,512 --budget-seconds 20 --out $OUT/r/configs \
    > $OUT/r/autotune-h$h.log 2>&1
  echo "autotune h$h rc=$? t=$SECONDS" >> $OUT/r/times.txt
done
KDAKIT_KERNEL_CONFIG_DIR=$OUT/r/configs timeout $(( ${CALL_LIMIT:-580} - SECONDS )) .carry/calls/kd kernels served \
  --arms triton,helion --reps 3 --stack-cases 1x16 --results-dir $OUT/r/served --run-id vm > $OUT/r/served.log 2>&1
echo "served rc=$? t=$SECONDS" >> $OUT/r/times.txt
finish
