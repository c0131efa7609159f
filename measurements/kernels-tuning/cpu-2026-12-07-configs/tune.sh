# Call, after ../cpu-2026-12-06-next-calls/setup-calls.sh; carry [".whl", ".carry"]. Autotune of the
# prefill kernels named in KERNELS (default: gate, then intra) on this GPU's SKU at the served token buckets,
# for each head count in HEADS, into a copy of the tree's configs (kernels/configs, so files returned by an
# earlier call and committed are kept); files are written per bucket and the copy travels back in
# results.tgz.
set -u
source measurements/kernels-tuning/cpu-2026-12-06-next-calls/preamble.sh
sku=$(python3 -P -c "import torch, kdakit.kernels.tuned as t; print(t.sku_of(torch.cuda.get_device_name()))")
echo "sku=$sku" >> $OUT/r/times.txt
cp -r kernels/configs $OUT/r/configs
for kernel in ${KERNELS:-prefill-gate prefill-intra}; do
  for h in ${HEADS:-16 8}; do
    timeout -k 10 $(( ${CALL_LIMIT:-585} - SECONDS )) .carry/calls/kd kernels autotune --sku $sku \
      --kernels $kernel --heads $h --tokens ${TOKENS:-16,512,4096,8192} --budget-seconds ${BUDGET:-8} \
      --out $OUT/r/configs \
      > $OUT/r/autotune-$kernel-h$h.log 2>&1
    echo "$kernel h$h rc=$? t=$SECONDS" >> $OUT/r/times.txt
  done
done
finish
