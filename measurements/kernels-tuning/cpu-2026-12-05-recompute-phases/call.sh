# Call: recompute_wk in phases (its wheel in .carry/wkp, branch exp/wk-phased) and prefill_wku.py (the same with
# recompute_u merged into it, one launch) against main's chunk_kda (prefill_old.py) in one process: output and
# state differences, per-kernel µs, two interleaved rounds. Then the phased kernel's configs beside main's
# chunk_kda. Rows written as they finish.
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
PROBE_EXTRA=prefill_wku timeout 240 python3 -P .carry/calls/qprobe.py "1x4096:16,8x512:16,2x4096:16,1x4096:8,1x512:16" $OUT/r/wkp_vs_main.jsonl > $OUT/r/wkp_vs_main.log 2>&1
echo "qprobe rc=$? t=$SECONDS" >> $OUT/r/times.txt
left=$(( 520 - SECONDS ))
[ $left -gt 60 ] && PROBE_KERNEL=recompute_wk PROBE_CFGS='[{"block_sizes":[64],"num_warps":4,"num_stages":2,"indexing":"pointer"},{"block_sizes":[32],"num_warps":4,"num_stages":2,"indexing":"pointer"},{"block_sizes":[64],"num_warps":8,"num_stages":2,"indexing":"pointer"},{"block_sizes":[32],"num_warps":2,"num_stages":2,"indexing":"pointer"},{"block_sizes":[64],"num_warps":4,"num_stages":1,"indexing":"pointer"}]' timeout $left python3 -P .carry/calls/kprobe.py parent "16:1x4096,8x512;8:1x4096" $OUT/r/wkp_configs.jsonl $left > $OUT/r/wkp_configs.log 2>&1
echo "kprobe rc=$? t=$SECONDS" >> $OUT/r/times.txt
kill $packer; tar czf $OUT/results.tgz -C $OUT r
