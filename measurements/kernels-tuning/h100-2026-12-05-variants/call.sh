# Call: branch exp/land2 (.carry/land2: intra by block pairs with the diagonal inverses, solve from them, one
# `recompute` kernel for U, qg, kg and W in phases) against main (prefill_old.py) with three single-variant arms
# (qprobe), then served prefill with exp/land2 against triton in SGLang's prefill graph. Rows written as they
# finish.
set -u
mkdir -p $OUT/r
( while sleep 10; do tar czf $OUT/results.tgz -C $OUT r 2>/dev/null; done ) & packer=$!
source .carry/gpu-host/setup.sh > $OUT/r/setup.log 2>&1
export KDA_STUBS=sgl_kernel
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site-land2 .carry/land2/kdakit-*.whl >> $OUT/r/setup.log 2>&1
export PYTHONPATH="/tmp/site-land2:$PYTHONPATH"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/r/env.txt
nvidia-smi > $OUT/r/nvidia-smi.txt
python3 -P -c "import torch, triton, importlib.metadata as m, inspect, kdakit.kernels.prefill as p; print(torch.__version__, triton.__version__, m.version('helion'), m.version('sglang'), p.__file__, list(p._FNS))" >> $OUT/r/env.txt 2>&1
echo "setup t=$SECONDS" >> $OUT/r/times.txt
PROBE_EXTRA=prefill_wku,prefill_ipairs,prefill_pairs_solve timeout 240 python3 -P .carry/calls/qprobe.py "1x4096:16,8x512:16,1x512:16,1x4096:8" $OUT/r/variants_vs_main.jsonl > $OUT/r/variants_vs_main.log 2>&1
echo "qprobe rc=$? t=$SECONDS" >> $OUT/r/times.txt
timeout $(( 575 - SECONDS )) .carry/calls/kd kernels served --arms helion,triton --reps 3 --results-dir $OUT/r/served --run-id land2 > $OUT/r/served.log 2>&1
echo "served rc=$? t=$SECONDS" >> $OUT/r/times.txt
kill $packer; tar czf $OUT/results.tgz -C $OUT r
