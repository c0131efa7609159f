# Call, after setup-calls.sh; carry [".whl", ".carry"]. main against its kernels compiled with mma.sync
# (the state pass; the state pass and recompute), every kernel at its module default, at 1x4096 and 8x512
# (16 heads) and 1x4096 (8 heads); then which MMA instructions each compiled state pass and recompute holds
# (Triton's cache). Rows written as they finish.
set -u
source measurements/kernels-tuning/cpu-2026-12-06-next-calls/preamble.sh
KDAKIT_KERNEL_CONFIGS=default timeout $(( ${CALL_LIMIT:-585} - 15 - SECONDS )) python3 -P .carry/calls/cprobe.py \
  "1x4096:16,8x512:16,1x4096:8" $OUT/r/mma2.jsonl main,prefill_state_mma2,prefill_mma2_both \
  > $OUT/r/cprobe.log 2>&1
echo "cprobe rc=$? t=$SECONDS" >> $OUT/r/times.txt
for f in $(grep -lE "_helion__(state_pass|recompute)" -r ${TRITON_CACHE_DIR:-$HOME/.triton/cache} --include=*.ptx); do
  echo "$(grep -m1 -oE '_helion__[a-z_0-9]+' $f) wgmma=$(grep -c wgmma.mma_async $f) mma.sync=$(grep -c 'mma.sync' $f)"
done > $OUT/r/mma-kinds.txt 2>&1
finish
