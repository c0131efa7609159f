# Call, after setup-calls.sh; carry [".whl", ".carry"]. Served prefill (kdakit and SGLang's Triton in SGLang's
# prefill graph, per layer and the 34-layer stack), then the prefill bench with every arm; BENCH_HEADS (default
# 16) heads. Rows written as they finish.
set -u
source measurements/kernels-tuning/cpu-2026-12-06-next-calls/preamble.sh
timeout 260 .carry/calls/kd kernels served --arms triton,helion --reps 3 --results-dir $OUT/r/served --run-id vm \
  > $OUT/r/served.log 2>&1
echo "served rc=$? t=$SECONDS" >> $OUT/r/times.txt
timeout $(( 580 - SECONDS )) .carry/calls/kd kernels bench --phases prefill --repeats 2 --heads ${BENCH_HEADS:-16} \
  --results-dir $OUT/r/bench --run-id vm > $OUT/r/bench.log 2>&1
echo "bench rc=$? t=$SECONDS" >> $OUT/r/times.txt
finish
