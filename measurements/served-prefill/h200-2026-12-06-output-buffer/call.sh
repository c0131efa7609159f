# Call, after ../cpu-2026-12-06-next-calls/setup-calls.sh; carry [".whl", ".carry"]. On an H200 (the targets'
# GPU): served and the stack, then the prefill bench at 16 and 8 heads, in one call. On an H100: served and the
# bench at 16 heads with the H100 configs shipped for every recompute bucket (served-bench.sh).
set -u
if ! nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  exec bash measurements/kernels-tuning/cpu-2026-12-06-next-calls/served-bench.sh
fi
source measurements/kernels-tuning/cpu-2026-12-06-next-calls/preamble.sh
timeout 220 .carry/calls/kd kernels served --arms triton,helion --reps 3 \
  --results-dir $OUT/r/served --run-id vm > $OUT/r/served.log 2>&1
echo "served rc=$? t=$SECONDS" >> $OUT/r/times.txt
for h in 16 8; do
  timeout $(( h == 16 ? 180 : 585 - SECONDS )) .carry/calls/kd kernels bench --phases prefill --repeats 2 \
    --heads $h --results-dir $OUT/r/bench-h$h --run-id vm > $OUT/r/bench-h$h.log 2>&1
  echo "bench h$h rc=$? t=$SECONDS" >> $OUT/r/times.txt
done
finish
