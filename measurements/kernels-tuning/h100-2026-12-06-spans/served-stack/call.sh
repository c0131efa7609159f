# Call, after ../cpu-2026-12-06-next-calls/setup-calls.sh; carry [".whl", ".carry"]. Served prefill without the
# per-kernel profile (which cut the first call's stack short): per layer and the 34-layer stack, then the prefill
# bench at 16 heads with what time is left. Rows written as they finish.
set -u
source measurements/kernels-tuning/cpu-2026-12-06-next-calls/preamble.sh
timeout 300 .carry/calls/kd kernels served --arms triton,helion --reps 3 \
  --results-dir $OUT/r/served --run-id vm > $OUT/r/served.log 2>&1
echo "served rc=$? t=$SECONDS" >> $OUT/r/times.txt
timeout $(( 590 - SECONDS )) .carry/calls/kd kernels bench --phases prefill --repeats 2 \
  --heads 16 --results-dir $OUT/r/bench-h16 --run-id vm > $OUT/r/bench-h16.log 2>&1
echo "bench h16 rc=$? t=$SECONDS" >> $OUT/r/times.txt
finish
