# Call, after ../cpu-2026-12-06-next-calls/setup-calls.sh and this folder's setup-calls.sh; carry [".whl",
# ".carry"]. kdakit with stack2m adopted (.carry/stackwheel, ahead of the bundle's kdakit on the path): the
# served prefill (kdakit and SGLang's Triton in SGLang's prefill graph, per layer and the 34-layer stack),
# then the prefill bench with every arm at 16 heads. Rows as they finish.
set -u
source measurements/kernels-tuning/cpu-2026-12-06-next-calls/preamble.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site_stack \
  .carry/stackwheel/kdakit-*.whl > $OUT/r/stack-pip.log 2>&1
export PYTHONPATH=/tmp/site_stack:${PYTHONPATH:-}
python3 -P -c "import kdakit.kernels.prefill as p; print(p.__file__)" >> $OUT/r/env.txt 2>&1
timeout ${SERVED_LIMIT:-260} .carry/calls/kd kernels served --arms triton,helion --reps 3 \
  --results-dir $OUT/r/served --run-id vm > $OUT/r/served.log 2>&1
echo "served rc=$? t=$SECONDS" >> $OUT/r/times.txt
timeout $(( ${CALL_LIMIT:-580} - SECONDS )) .carry/calls/kd kernels bench --phases prefill --repeats 2 \
  --heads 16 --results-dir $OUT/r/bench --run-id vm > $OUT/r/bench.log 2>&1
echo "bench rc=$? t=$SECONDS" >> $OUT/r/times.txt
finish
