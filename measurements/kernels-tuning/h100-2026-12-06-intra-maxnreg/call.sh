# Call, after setup-calls.sh; carry [".whl", ".carry"]. Intra with its registers capped at 128 (16 one-warp
# programs an SM instead of 8), and intra as one program a block pair (default, capped, K slice 16), against main,
# every kernel at its module default; then served prefill and the
# prefill bench (every arm, 16 heads) of main with its shipped configs, up to CALL_LIMIT s (default 585). Rows
# written as they finish.
set -u
mkdir -p $OUT/r
( while sleep 10; do tar czf $OUT/results.tgz -C $OUT r 2>/dev/null; done ) & packer=$!
source .carry/gpu-host/setup.sh > $OUT/r/setup.log 2>&1
export KDA_STUBS=sgl_kernel
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/r/env.txt
python3 -P -c "import torch, triton, importlib.metadata as m; print(torch.__version__, triton.__version__, m.version('helion'), m.version('sglang'), m.version('fla-core'))" >> $OUT/r/env.txt 2>&1
echo "setup t=$SECONDS" >> $OUT/r/times.txt
limit=${CALL_LIMIT:-585}
left() { echo $(( limit - SECONDS )); }
KDAKIT_KERNEL_CONFIGS=default timeout $(( $(left) < 220 ? $(left) : 220 )) python3 -P .carry/calls/cprobe.py "1x4096:16,8x512:16" \
  $OUT/r/intra.jsonl main,prefill_intra_r128,prefill_intra_pairs,prefill_intra_pairs_r128,prefill_intra_pairs_k16 > $OUT/r/cprobe.log 2>&1
echo "cprobe rc=$? t=$SECONDS" >> $OUT/r/times.txt
# each later step only when enough of the call is left (served prefill needs about 120 s)
if [ $(left) -gt 120 ]; then
  timeout $(( $(left) < 150 ? $(left) : 150 )) .carry/calls/kd kernels served --arms helion,triton --reps 3 \
    --results-dir $OUT/r/served --run-id vm > $OUT/r/served.log 2>&1
  echo "served rc=$? t=$SECONDS" >> $OUT/r/times.txt
fi
if [ $(left) -gt 90 ]; then
  timeout $(left) .carry/calls/kd kernels bench --phases prefill --repeats 2 \
    --results-dir $OUT/r/bench --run-id vm > $OUT/r/bench.log 2>&1
  echo "bench rc=$? t=$SECONDS" >> $OUT/r/times.txt
fi
kill $packer; tar czf $OUT/results.tgz -C $OUT r
