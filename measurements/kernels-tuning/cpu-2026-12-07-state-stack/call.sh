# Call, after ../cpu-2026-12-06-next-calls/setup-calls.sh and this folder's setup-calls.sh; carry [".whl",
# ".carry"]. The stacked state pass (ARMS: stack2m, stack2d, stack1) against main, every other kernel at its
# module default, at 1x4096 (16 and 8 heads), 8x512 and 1x16 (16 heads); then the prefill's GPU tests on
# kdakit with stack2m adopted (its wheel in .carry/stackwheel). Rows and test results as they finish.
set -u
source measurements/kernels-tuning/cpu-2026-12-06-next-calls/preamble.sh
KDAKIT_KERNEL_CONFIGS=default timeout $(( ${PROBE_LIMIT:-300} - SECONDS )) python3 -P .carry/calls/cprobe.py \
  "1x4096:16,8x512:16,1x4096:8,1x16:16" $OUT/r/stack.jsonl \
  ${ARMS:-main,prefill_stack2m,prefill_stack2d,prefill_stack1} \
  > $OUT/r/cprobe.log 2>&1
echo "cprobe rc=$? t=$SECONDS" >> $OUT/r/times.txt
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site_stack \
  .carry/stackwheel/kdakit-*.whl > $OUT/r/stack-pip.log 2>&1
PYTHONPATH=/tmp/site_stack:$PYTHONPATH timeout $(( ${CALL_LIMIT:-585} - SECONDS )) python3 -P -m pytest \
  -p kda_stubs -p no:cacheprovider -m gpu -v -rA --durations=10 tests/kernels/test_prefill_gpu.py \
  --junitxml=$OUT/r/stack-prefill-gpu.xml > $OUT/r/stack-prefill-gpu.log 2>&1
echo "stack gpu tests rc=$? t=$SECONDS" >> $OUT/r/times.txt
finish
