# Call, after setup-calls.sh; carry [".whl", ".carry"]. Served prefill per layer for SGLang's Triton and kdakit
# in SGLang's prefill graph, then the stack at 8x512 and 1x4096 (the case whose Triton capture has failed
# after earlier cases' graphs were dropped). Rows written as they finish; CALL_LIMIT bounds the call.
set -u
source measurements/kernels-tuning/cpu-2026-12-06-next-calls/preamble.sh
timeout $(( ${CALL_LIMIT:-580} - SECONDS )) .carry/calls/kd kernels served --arms triton,helion --reps 3 \
  --stack-cases 8x512,1x4096 --results-dir $OUT/r/served --run-id vm > $OUT/r/served.log 2>&1
echo "served rc=$? t=$SECONDS" >> $OUT/r/times.txt
finish
