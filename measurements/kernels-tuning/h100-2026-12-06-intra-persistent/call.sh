# Call, after setup-calls.sh; carry [".whl", ".carry"]. Intra on a persistent grid against main (flat): alone
# (8 programs an SM, as many as 255 registers allow), and at 16 programs an SM with a 128-register cap
# (blocked and interleaved, 2 and 1 stages); every kernel at its module default. Rows written as they finish.
set -u
mkdir -p $OUT/r
( while sleep 10; do tar czf $OUT/results.tgz -C $OUT r 2>/dev/null; done ) & packer=$!
source .carry/gpu-host/setup.sh > $OUT/r/setup.log 2>&1
export KDA_STUBS=sgl_kernel
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/r/env.txt
python3 -P -c "import torch, triton, importlib.metadata as m; print(torch.__version__, triton.__version__, m.version('helion'), m.version('sglang'), m.version('fla-core'))" >> $OUT/r/env.txt 2>&1
echo "setup t=$SECONDS" >> $OUT/r/times.txt
limit=${CALL_LIMIT:-585}
KDAKIT_KERNEL_CONFIGS=default timeout $(( limit - SECONDS )) python3 -P .carry/calls/cprobe.py \
  "1x4096:16,8x512:16,1x4096:8" $OUT/r/intra.jsonl \
  main,prefill_intra_pb_m8,prefill_intra_pb_m16_r128,prefill_intra_pi_m16_r128,prefill_intra_pb_m16_r128_s1 \
  > $OUT/r/cprobe.log 2>&1
echo "cprobe rc=$? t=$SECONDS" >> $OUT/r/times.txt
kill $packer; tar czf $OUT/results.tgz -C $OUT r
