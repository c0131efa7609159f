# Call, after setup-calls.sh; carry [".whl", ".carry"]. Per-kernel times (cprobe.py, module defaults) of main,
# of the module before the state pass's step order (prefill_presorder: whether that order slowed 1x16) and
# of prefill_qprime (the output's state-free part moved to recompute); then the served record of main with
# what time is left. Rows as they finish.
set -u
source measurements/kernels-tuning/cpu-2026-12-06-next-calls/preamble.sh
KDAKIT_KERNEL_CONFIGS=default timeout 270 python3 -P .carry/calls/cprobe.py \
  "1x16:16,1x4096:16,8x512:16,1x4096:8" $OUT/r/qprime.jsonl main,prefill_presorder,prefill_qprime \
  > $OUT/r/cprobe.log 2>&1
echo "cprobe rc=$? t=$SECONDS" >> $OUT/r/times.txt
timeout $(( ${CALL_LIMIT:-585} - SECONDS )) .carry/calls/kd kernels served --arms triton,helion --reps 3 \
  --results-dir $OUT/r/served --run-id vm > $OUT/r/served.log 2>&1
echo "served rc=$? t=$SECONDS" >> $OUT/r/times.txt
finish
