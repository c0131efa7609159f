# Call, after setup-calls.sh; carry [".whl", ".carry"]. main's prefill (prefill_base) against the transition
# tree's (the wheel: the state step as two dots of the state with no chain between them), module defaults,
# interleaved over two rounds; then the prefill's GPU tests on the transition tree. Rows written as they finish.
set -u  # ran as measurements/kernels-tuning/cpu-2026-12-06-transition/call.sh
source measurements/kernels-tuning/cpu-2026-12-06-next-calls/preamble.sh
KDAKIT_KERNEL_CONFIGS=default timeout 300 python3 -P .carry/calls/cprobe.py \
  "1x4096:16,8x512:16,1x4096:8,1x16:16" $OUT/r/transition.jsonl prefill_base,main > $OUT/r/cprobe.log 2>&1
echo "cprobe rc=$? t=$SECONDS" >> $OUT/r/times.txt
timeout $(( 585 - SECONDS )) python3 -P -m pytest -p kda_stubs -p no:cacheprovider -m gpu -v -rA \
  tests/kernels/test_prefill_gpu.py --junitxml=$OUT/r/prefill-gpu.xml > $OUT/r/prefill-gpu.log 2>&1
echo "tests rc=$? t=$SECONDS" >> $OUT/r/times.txt
finish
