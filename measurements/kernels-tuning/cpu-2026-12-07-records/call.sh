# Call, after ../cpu-2026-12-06-next-calls/setup-calls.sh; carry [".whl", ".carry"]. On an H200: the served
# and bench record of ../cpu-2026-12-07-state-order/served-bench.sh. On an H100, which already has a full
# served record of this code: the prefill bench's cases that record lacks (2x4096 at 16 heads, all at 8).
set -u
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  exec bash measurements/kernels-tuning/cpu-2026-12-07-state-order/served-bench.sh
fi
source measurements/kernels-tuning/cpu-2026-12-06-next-calls/preamble.sh
limit=${CALL_LIMIT:-570}
timeout 200 .carry/calls/kd kernels bench --phases prefill --repeats 2 --heads 16 --prefill-shapes 2x4096 \
  --results-dir $OUT/r/bench-h16 --run-id vm > $OUT/r/bench-h16.log 2>&1
echo "bench h16 2x4096 rc=$? t=$SECONDS" >> $OUT/r/times.txt
timeout $(( limit - SECONDS )) .carry/calls/kd kernels bench --phases prefill --repeats 2 --heads 8 \
  --results-dir $OUT/r/bench-h8 --run-id vm > $OUT/r/bench-h8.log 2>&1
echo "bench h8 rc=$? t=$SECONDS" >> $OUT/r/times.txt
finish
