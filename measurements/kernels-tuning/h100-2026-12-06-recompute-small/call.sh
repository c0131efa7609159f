# Call, after ../cpu-2026-12-06-next-calls/setup-calls.sh; carry [".whl", ".carry"]. On an H200 (the targets'
# GPU): served and the stack, then the prefill bench at 16 and 8 heads. On an H100: served with the shipped
# H100 configs, then the recompute buckets the last search did not reach (512 and 16 tokens, 16 and 8 heads).
set -u  # ran as measurements/kernels-tuning/cpu-2026-12-06-session21/either.sh
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  exec bash measurements/kernels-tuning/cpu-2026-12-06-h100-search/either.sh
fi
source measurements/kernels-tuning/cpu-2026-12-06-next-calls/preamble.sh
timeout 220 .carry/calls/kd kernels served --arms triton,helion --reps 3 \
  --results-dir $OUT/r/served --run-id vm > $OUT/r/served.log 2>&1
echo "served rc=$? t=$SECONDS" >> $OUT/r/times.txt
sku=$(python3 -P -c "import torch, kdakit.kernels.tuned as t; print(t.sku_of(torch.cuda.get_device_name()))")
cp -r kernels/configs $OUT/r/configs
for h in 16 8; do
  timeout $(( h == 16 ? 180 : 585 - SECONDS )) .carry/calls/kd kernels autotune --sku $sku \
    --kernels prefill-recompute --heads $h --tokens 512,16 --budget-seconds 30 --out $OUT/r/configs \
    > $OUT/r/autotune-h$h.log 2>&1
  echo "autotune h$h rc=$? t=$SECONDS" >> $OUT/r/times.txt
done
finish
