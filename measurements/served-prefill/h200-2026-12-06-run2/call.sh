# The call, as run (one command line; carry [".whl", ".carry"] after
# ../../kernels-tuning/cpu-2026-12-06-next-calls/setup-calls.sh): the decode and verify bench
# (../../kernels-bench/h200-2026-12-06-decode-verify/), then a second served run with the 1x4096 stack case.
source measurements/kernels-tuning/cpu-2026-12-06-next-calls/preamble.sh
timeout 240 .carry/calls/kd kernels bench --phases decode,verify --repeats 2 --results-dir $OUT/r/bench-dv \
  --run-id vm > $OUT/r/bench-dv.log 2>&1
echo "bench dv rc=$? t=$SECONDS" >> $OUT/r/times.txt
timeout $(( 390 - SECONDS )) .carry/calls/kd kernels served --arms triton,helion --reps 3 --stack-cases 1x4096 \
  --results-dir $OUT/r/served2 --run-id vm > $OUT/r/served2.log 2>&1
echo "served2 rc=$? t=$SECONDS" >> $OUT/r/times.txt
finish
