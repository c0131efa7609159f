# Call: three prefill variants against main's chunk_kda (prefill_old.py, main's configs) in one process: output
# and state differences, per-kernel µs (torch profiler, 20 calls, two interleaved rounds). "new" is the wheel
# in .carry/wkp (branch exp/wk-phased: recompute_wk in phases); prefill_wku.py adds recompute_u merged into it;
# prefill_ipairs.py is main with intra run as one program per block pair; prefill_pairs_solve.py adds the diagonal
# blocks' inverses made in intra's diagonal programs. Then intra configs for both intra forms at 1x4096. Rows
# written as they finish.
set -u
mkdir -p $OUT/r
( while sleep 10; do tar czf $OUT/results.tgz -C $OUT r 2>/dev/null; done ) & packer=$!
source .carry/gpu-host/setup.sh > $OUT/r/setup.log 2>&1
export KDA_STUBS=sgl_kernel
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site-wkp .carry/wkp/kdakit-*.whl >> $OUT/r/setup.log 2>&1
export PYTHONPATH="/tmp/site-wkp:$PYTHONPATH"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/r/env.txt
nvidia-smi > $OUT/r/nvidia-smi.txt
python3 -P -c "import torch, triton, importlib.metadata as m, inspect, kdakit.kernels.prefill as p; print(torch.__version__, triton.__version__, m.version('helion'), m.version('sglang'), p.__file__, 'In phases' in inspect.getsource(p._recompute_wk_fn))" >> $OUT/r/env.txt 2>&1
echo "setup t=$SECONDS" >> $OUT/r/times.txt
PROBE_EXTRA=prefill_wku,prefill_ipairs,prefill_pairs_solve timeout 360 python3 -P .carry/calls/qprobe.py "1x4096:16,8x512:16,1x4096:8,1x512:16" $OUT/r/variants_vs_main.jsonl > $OUT/r/variants_vs_main.log 2>&1
echo "qprobe rc=$? t=$SECONDS" >> $OUT/r/times.txt
for cfg in '[16],"num_warps":1,"num_stages":2' '[64],"num_warps":1,"num_stages":2' '[32],"num_warps":2,"num_stages":2' '[32],"num_warps":1,"num_stages":1'; do
  left=$(( 560 - SECONDS )); [ $left -lt 50 ] && break
  KDAKIT_PREFILL_CONFIGS="{\"configs\":{\"intra\":{\"block_sizes\":$cfg,\"indexing\":\"pointer\"}}}" PROBE_EXTRA=prefill_ipairs timeout $left python3 -P .carry/calls/qprobe.py "1x4096:16" $OUT/r/intra_configs.jsonl >> $OUT/r/intra_configs.log 2>&1
  echo "intra $cfg rc=$? t=$SECONDS" >> $OUT/r/times.txt
done
kill $packer; tar czf $OUT/results.tgz -C $OUT r
