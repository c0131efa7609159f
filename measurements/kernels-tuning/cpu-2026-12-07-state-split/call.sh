# Call, after ../cpu-2026-12-06-next-calls/setup-calls.sh and this folder's setup-calls.sh; carry [".whl",
# ".carry"]. The state pass as chain and output programs (ARMS: prefill_side at a 16-wide tile, prefill_side32
# at 32) against main, every other kernel at its module default: first 1x4096 at 16 heads alone (a wait that
# never ends traps within seconds; the limit stops anything else), then 8x512, 1x16 and 1x4096 at 8 heads.
# Rows as they finish.
set -u
source measurements/kernels-tuning/cpu-2026-12-06-next-calls/preamble.sh
arms=${ARMS:-main,prefill_side,prefill_side32}
KDAKIT_KERNEL_CONFIGS=default timeout -k 10 ${FIRST_LIMIT:-200} python3 -P .carry/calls/cprobe.py \
  "1x4096:16" $OUT/r/side.jsonl $arms > $OUT/r/cprobe-first.log 2>&1
echo "cprobe first rc=$? t=$SECONDS" >> $OUT/r/times.txt
KDAKIT_KERNEL_CONFIGS=default timeout -k 10 $(( ${CALL_LIMIT:-585} - SECONDS )) python3 -P \
  .carry/calls/cprobe.py "8x512:16,1x16:16,1x4096:8" $OUT/r/side.jsonl $arms > $OUT/r/cprobe-rest.log 2>&1
echo "cprobe rest rc=$? t=$SECONDS" >> $OUT/r/times.txt
finish
