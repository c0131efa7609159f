# Call, after setup-calls.sh; carry [".whl", ".carry"]. Main against the V-first pass at 3 stages where main runs
# its 64-wide tile (8 sequences, 16 heads) and at 8 heads, 1x4096. Rows as they finish.
set -u
source measurements/kernels-tuning/cpu-2026-12-06-next-calls/preamble.sh
KDAKIT_KERNEL_CONFIGS=default timeout $(( ${PROBE_LIMIT:-290} - SECONDS )) python3 -P .carry/calls/cprobe.py \
  "8x512:16,1x4096:8" $OUT/r/vfirst-many.jsonl main,prefill_vtu3 > $OUT/r/cprobe-many.log 2>&1
echo "cprobe rc=$? t=$SECONDS" >> $OUT/r/times.txt
finish
