# Call, after ../cpu-2026-12-06-next-calls/setup-calls.sh; carry [".whl", ".carry"]. Served prefill (kdakit
# and SGLang's Triton in SGLang's prefill graph, per layer and the 34-layer stack), then the prefill bench
# with every arm at 16 heads, and at 8 where CALL_LIMIT (default 585 s) leaves time. Rows as they finish.
set -u
source measurements/kernels-tuning/cpu-2026-12-06-next-calls/preamble.sh
limit=${CALL_LIMIT:-585}
timeout 250 .carry/calls/kd kernels served --arms triton,helion --reps 3 --results-dir $OUT/r/served \
  --run-id vm > $OUT/r/served.log 2>&1
echo "served rc=$? t=$SECONDS" >> $OUT/r/times.txt
for h in 16 8; do
  end=$(( h == 16 && limit >= 585 ? 420 : limit ))
  (( end - SECONDS > 60 )) || break
  timeout $(( end - SECONDS )) .carry/calls/kd kernels bench --phases prefill --repeats 2 --heads $h \
    --results-dir $OUT/r/bench-h$h --run-id vm > $OUT/r/bench-h$h.log 2>&1
  echo "bench h$h rc=$? t=$SECONDS" >> $OUT/r/times.txt
done
finish
