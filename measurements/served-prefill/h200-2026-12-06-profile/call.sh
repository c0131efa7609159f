# Call, after setup-calls.sh; carry [".whl", ".carry"]. Served prefill per layer with each layer's GPU kernels
# (torch profiler over 5 more calls) for kdakit and SGLang's Triton in SGLang's prefill graph; the stack only
# at 1x16 (its full run is in the served calls without the profiler). Rows written as they finish.
set -u
source measurements/kernels-tuning/cpu-2026-12-06-next-calls/preamble.sh
timeout $(( ${CALL_LIMIT:-580} - SECONDS )) .carry/calls/kd kernels served --arms triton,helion --reps 3 \
  --profile-calls 5 --stack-cases 1x16 --results-dir $OUT/r/served --run-id vm > $OUT/r/served.log 2>&1
echo "served rc=$? t=$SECONDS" >> $OUT/r/times.txt
finish
