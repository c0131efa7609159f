# Call, after ../cpu-2026-12-06-next-calls/setup-calls.sh; carry [".whl", ".carry"]. The step-length toy
# (state_steps.py: 64- and 128-token steps, 1x4096 at 16 and 8 heads), then the per-kernel profile in
# SGLang's prefill graph of the code as it stands, where CALL_LIMIT (default 580 s) leaves 120 s for it.
# Rows as they finish.
set -u
source measurements/kernels-tuning/cpu-2026-12-06-next-calls/preamble.sh
timeout 240 python3 -P measurements/kernels-tuning/cpu-2026-12-07-chunk128/state_steps.py time \
  $OUT/r/steps.jsonl > $OUT/r/steps.log 2>&1
echo "steps rc=$? t=$SECONDS" >> $OUT/r/times.txt
if (( ${CALL_LIMIT:-580} - SECONDS > 120 )); then
  timeout $(( ${CALL_LIMIT:-580} - SECONDS )) .carry/calls/kd kernels served --arms triton,helion --reps 3 \
    --profile-calls 5 --stack-cases 1x16 --results-dir $OUT/r/served --run-id vm > $OUT/r/served.log 2>&1
  echo "served rc=$? t=$SECONDS" >> $OUT/r/times.txt
fi
finish
