# Call, after ../cpu-2026-12-06-next-calls/setup-calls.sh and this folder's setup-calls.sh; carry [".whl",
# ".carry"]. The V-first state pass (four arms) against main, every other kernel at its module default, at
# 1x4096 (16 and 8 heads) and 8x512 (16 heads); then the prefill's GPU tests on kdakit with the V-first pass
# adopted (its wheel in .carry/vtwheel). Rows and test results as they finish.
set -u
source measurements/kernels-tuning/cpu-2026-12-06-next-calls/preamble.sh
KDAKIT_KERNEL_CONFIGS=default timeout $(( ${PROBE_LIMIT:-250} - SECONDS )) python3 -P .carry/calls/cprobe.py \
  "1x4096:16,1x4096:8,8x512:16" $OUT/r/vfirst.jsonl main,prefill_vt,prefill_vtu,prefill_vtu3,prefill_vt128 \
  > $OUT/r/cprobe.log 2>&1
echo "cprobe rc=$? t=$SECONDS" >> $OUT/r/times.txt
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site_vt \
  .carry/vtwheel/kdakit-*.whl > $OUT/r/vt-pip.log 2>&1
PYTHONPATH=/tmp/site_vt:$PYTHONPATH timeout $(( 585 - SECONDS )) python3 -P -m pytest -p kda_stubs \
  -p no:cacheprovider -m gpu -v -rA --durations=10 tests/kernels/test_prefill_gpu.py \
  --junitxml=$OUT/r/vt-prefill-gpu.xml > $OUT/r/vt-prefill-gpu.log 2>&1
echo "vt gpu tests rc=$? t=$SECONDS" >> $OUT/r/times.txt
finish
