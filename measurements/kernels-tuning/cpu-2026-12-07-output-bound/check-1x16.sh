# Call, after ../cpu-2026-12-06-next-calls/setup-calls.sh; carry [".whl", ".carry"]. Whether the state pass's
# step order slowed kdakit at 1x16 in SGLang's prefill graph (88.2 µs on an H100, against 37.0 on the H200 and
# 41.8 to 46.8 on H100s before it): per-kernel times of main and of the module before the order changed
# (103bf5f, written here as prefill_presorder), then the served record. Rows as they finish.
set -u
source measurements/kernels-tuning/cpu-2026-12-06-next-calls/preamble.sh
KDAKIT_KERNEL_CONFIGS=default timeout 150 python3 -P .carry/calls/cprobe.py "1x16:16,1x4096:16" \
  $OUT/r/order-1x16.jsonl main,prefill_presorder > $OUT/r/cprobe.log 2>&1
echo "cprobe rc=$? t=$SECONDS" >> $OUT/r/times.txt
timeout $(( ${CALL_LIMIT:-585} - SECONDS )) .carry/calls/kd kernels served --arms triton,helion --reps 5 \
  --results-dir $OUT/r/served --run-id vm > $OUT/r/served.log 2>&1
echo "served rc=$? t=$SECONDS" >> $OUT/r/times.txt
finish
