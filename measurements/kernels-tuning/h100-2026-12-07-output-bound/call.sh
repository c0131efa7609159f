# Call, after setup-calls.sh and with the split kernel's wheel (kdakit built from the tree that adopts it) in
# .carry/split/; carry [".whl", ".carry"]. cprobe.py: main beside its split copy and the no-output bound,
# 1x4096 and 8x512 at 16 heads. Where the split's whole chunk_kda is faster in both cases (the faster of
# two rounds each), its wheel replaces main's; then the served record and the prefill bench at 16 heads run
# on whichever is installed (served.log names it). Rows as they finish.
set -u
source measurements/kernels-tuning/cpu-2026-12-06-next-calls/preamble.sh
KDAKIT_KERNEL_CONFIGS=default timeout 170 python3 -P .carry/calls/cprobe.py "1x4096:16,8x512:16" \
  $OUT/r/bound.jsonl main,prefill_split,prefill_noout > $OUT/r/cprobe.log 2>&1
echo "cprobe rc=$? t=$SECONDS" >> $OUT/r/times.txt
if python3 - $OUT/r/bound.jsonl > $OUT/r/decision.txt <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
best = {}
for r in rows:
    if "total" in r and r["out_err"] < 5e-2:
        key = (r["case"], r["arm"])
        best[key] = min(best.get(key, 1e9), r["total"])
cases = {c for c, _ in best}
wins = [best.get((c, "prefill_split"), 1e9) < best.get((c, "main"), 0) for c in cases]
print("split wins" if len(cases) == 2 and all(wins) else "main stays", best)
sys.exit(0 if len(cases) == 2 and all(wins) else 1)
PY
then
  python3 -m pip install -q --no-deps --force-reinstall .carry/split/kdakit-0.1.0-py3-none-any.whl \
    >> $OUT/r/setup.log 2>&1
  echo "installed: split t=$SECONDS" >> $OUT/r/times.txt
else
  echo "installed: main t=$SECONDS" >> $OUT/r/times.txt
fi
python3 -P -c "import kdakit.kernels.prefill as p; print('prefill kernels:', sorted(p._FNS))" >> $OUT/r/env.txt
timeout 250 .carry/calls/kd kernels served --arms triton,helion --reps 3 --results-dir $OUT/r/served \
  --run-id vm > $OUT/r/served.log 2>&1
echo "served rc=$? t=$SECONDS" >> $OUT/r/times.txt
end=${CALL_LIMIT:-585}
if (( end - SECONDS > 60 )); then
  timeout $(( end - SECONDS )) .carry/calls/kd kernels bench --phases prefill --repeats 2 --heads 16 \
    --results-dir $OUT/r/bench-h16 --run-id vm > $OUT/r/bench-h16.log 2>&1
  echo "bench h16 rc=$? t=$SECONDS" >> $OUT/r/times.txt
fi
finish
