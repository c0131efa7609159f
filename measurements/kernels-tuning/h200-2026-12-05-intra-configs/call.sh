# Call: intra configs (grid order x warps x K slice) for main's intra and the one-pass variant, 1x4096 then
# 8x512 at 16 heads; rows written as they finish.
set -u
mkdir -p $OUT/r
( while sleep 10; do tar czf $OUT/results.tgz -C $OUT r 2>/dev/null; done ) & packer=$!
source .carry/gpu-host/setup.sh > $OUT/r/setup.log 2>&1
export KDA_STUBS=sgl_kernel
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/r/env.txt
python3 -P -c "import torch, triton, importlib.metadata as m; print(torch.__version__, triton.__version__, m.version('helion'), m.version('sglang'))" >> $OUT/r/env.txt 2>&1
echo "setup t=$SECONDS" >> $OUT/r/times.txt
timeout $(( 570 - SECONDS )) python3 -P .carry/calls/iprobe.py "1x4096:16,8x512:16" $OUT/r/intra_configs.jsonl main,intra2 > $OUT/r/iprobe.log 2>&1
echo "iprobe rc=$? t=$SECONDS" >> $OUT/r/times.txt
kill $packer; tar czf $OUT/results.tgz -C $OUT r
