# Call, after ../cpu-2026-12-06-next-calls/setup-calls.sh; carry [".whl", ".carry"]. The prefill bench at 8 heads
# with every arm, in the session's last device minutes. Rows written as they finish.
set -u
source measurements/kernels-tuning/cpu-2026-12-06-next-calls/preamble.sh
timeout $(( ${CALL_LIMIT:-180} - SECONDS )) .carry/calls/kd kernels bench --phases prefill --repeats 2 \
  --heads 8 --results-dir $OUT/r/bench-h8 --run-id vm > $OUT/r/bench-h8.log 2>&1
echo "bench h8 rc=$? t=$SECONDS" >> $OUT/r/times.txt
finish
