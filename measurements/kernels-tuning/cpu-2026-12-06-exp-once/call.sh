# Call, after setup-calls.sh; carry [".whl", ".carry"]. Intra's exp2 once a factor (main, this tree) against
# the module before it, every kernel at its module default, at 1x4096 and 8x512 (16 heads) and 1x4096
# (8 heads); then both against fp64 (fold_err, four cases, extreme decay and varlen among them); then served
# prefill, kdakit and triton in SGLang's graph, while time is left. Rows written as they finish.
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
KDAKIT_KERNEL_CONFIGS=default timeout $(( $(left) < 200 ? $(left) : 200 )) python3 -P .carry/calls/cprobe.py \
  "1x4096:16,8x512:16,1x4096:8" $OUT/r/exp.jsonl main,prefill_before > $OUT/r/cprobe.log 2>&1
echo "cprobe rc=$? t=$SECONDS" >> $OUT/r/times.txt
(cd .carry/calls && timeout $(( $(left) < 120 ? $(left) : 120 )) python3 -P fold_err.py cuda prefill_before) \
  > $OUT/r/fold_err.log 2>&1
echo "fold_err rc=$? t=$SECONDS" >> $OUT/r/times.txt
if [ $(left) -gt 60 ]; then
  timeout $(left) .carry/calls/kd kernels served --arms helion,triton --reps 3 \
    --results-dir $OUT/r/served --run-id vm > $OUT/r/served.log 2>&1
  echo "served rc=$? t=$SECONDS" >> $OUT/r/times.txt
fi
kill $packer; tar czf $OUT/results.tgz -C $OUT r
