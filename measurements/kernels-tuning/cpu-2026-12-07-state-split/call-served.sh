# Call, after ../cpu-2026-12-06-next-calls/setup-calls.sh and this folder's setup-calls.sh; carry [".whl",
# ".carry"]. kdakit with the chain and output programs adopted (.carry/splitwheel, ahead of the bundle's
# kdakit on the path): the prefill's GPU tests first (correctness in SGLang's graph, replays, tracking),
# then the served prefill (per layer and the 34-layer stack, kdakit and SGLang's Triton). Rows as they finish.
set -u
source measurements/kernels-tuning/cpu-2026-12-06-next-calls/preamble.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site_split \
  .carry/splitwheel/kdakit-*.whl > $OUT/r/split-pip.log 2>&1
export PYTHONPATH=/tmp/site_split:${PYTHONPATH:-}
python3 -P -c "import kdakit.kernels.prefill as p; print(p.__file__)" >> $OUT/r/env.txt 2>&1
timeout -k 10 ${TESTS_LIMIT:-330} python3 -P -m pytest -p kda_stubs -p no:cacheprovider -m gpu -v -rA \
  --durations=10 tests/kernels/test_prefill_gpu.py --junitxml=$OUT/r/side-prefill-gpu.xml \
  > $OUT/r/side-prefill-gpu.log 2>&1
echo "gpu tests rc=$? t=$SECONDS" >> $OUT/r/times.txt
timeout -k 10 $(( ${CALL_LIMIT:-585} - SECONDS )) .carry/calls/kd kernels served --arms triton,helion \
  --reps 3 --results-dir $OUT/r/served --run-id vm > $OUT/r/served.log 2>&1
echo "served rc=$? t=$SECONDS" >> $OUT/r/times.txt
finish
