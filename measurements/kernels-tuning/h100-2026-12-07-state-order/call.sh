# Call, after setup-calls.sh; carry [".whl", ".carry"]. The state pass's three step orders and 8 warps
# against main, every kernel at its module default, at 1x4096 and 8x512 (16 heads) and 1x4096 (8 heads).
# Rows as they finish.
set -u
source measurements/kernels-tuning/cpu-2026-12-06-next-calls/preamble.sh
KDAKIT_KERNEL_CONFIGS=default timeout $(( ${CALL_LIMIT:-330} - SECONDS )) python3 -P .carry/calls/cprobe.py \
  "1x4096:16,8x512:16,1x4096:8" $OUT/r/order.jsonl main,prefill_sorder,prefill_stop,prefill_sboth,prefill_w8 \
  > $OUT/r/cprobe.log 2>&1
echo "cprobe rc=$? t=$SECONDS" >> $OUT/r/times.txt
finish
