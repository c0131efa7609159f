# Call, after ../cpu-2026-12-06-next-calls/setup-calls.sh; carry [".whl", ".carry"]. The prefill kernel bench
# with every arm at the three bench shapes, 16 heads then 8 heads (BENCH_HEADS), one process each, within
# CALL_LIMIT seconds. Rows as they finish.
set -u
source measurements/kernels-tuning/cpu-2026-12-06-next-calls/preamble.sh
for h in ${BENCH_HEADS:-16 8}; do
  timeout $(( ${CALL_LIMIT:-585} - SECONDS )) .carry/calls/kd kernels bench --phases prefill --repeats 2 \
    --heads $h --results-dir $OUT/r/bench-h$h --run-id vm > $OUT/r/bench-h$h.log 2>&1
  echo "bench h$h rc=$? t=$SECONDS" >> $OUT/r/times.txt
done
finish
