# Call, after setup-calls.sh; carry [".whl", ".carry"]. The stack's captures, one after another, for both arms:
# each stack case captures a 34-layer graph after the previous case's graph was dropped (where SGLang's Triton
# arm has failed to capture at 1x4096). Short per-layer rows first. Rows written as they finish.
set -u
source measurements/kernels-tuning/cpu-2026-12-06-next-calls/preamble.sh
timeout $(( ${CALL_LIMIT:-580} - SECONDS )) .carry/calls/kd kernels served --arms triton,helion --reps 3 \
  --layer-cases 1x16 --stack-cases 1x16,8x512,1x4096,1x8192 --results-dir $OUT/r/served --run-id vm \
  > $OUT/r/served.log 2>&1
echo "served rc=$? t=$SECONDS" >> $OUT/r/times.txt
finish
