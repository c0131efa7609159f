# Call, after setup-calls.sh; carry [".whl", ".carry"]. Intra at its default (main) against 2 warps, a 16-wide K
# slice and 3 stages, every other kernel at its module default, at 1x4096 and 8x512 (16 heads) and 1x4096
# (8 heads). Rows written as they finish.
set -u
source measurements/kernels-tuning/cpu-2026-12-06-next-calls/preamble.sh
KDAKIT_KERNEL_CONFIGS=default timeout $(( ${CALL_LIMIT:-585} - SECONDS )) python3 -P .carry/calls/cprobe.py \
  "1x4096:16,8x512:16,1x4096:8" $OUT/r/intra.jsonl main,prefill_intra_w2,prefill_intra_k16,prefill_intra_s3 \
  > $OUT/r/cprobe.log 2>&1
echo "cprobe rc=$? t=$SECONDS" >> $OUT/r/times.txt
finish
