# On the CPU machine, from the repository root, after ../cpu-2026-12-06-next-calls/setup-calls.sh: the three
# state-pass orders of this folder as prefill module copies in .carry/calls/ (git-ignored) for cprobe.py, and
# main with the state pass at 8 warps (prefill_w8). The diffs are against kernels/prefill.py at a370b15.
set -eu
A=measurements/kernels-tuning/cpu-2026-12-07-state-order
for v in sorder stop sboth; do
  cp kernels/prefill.py .carry/calls/prefill_$v.py
  patch -s --fuzz=0 --no-backup-if-mismatch .carry/calls/prefill_$v.py < $A/state-$v.diff
done
python3 - <<'PY'
text = open("kernels/prefill.py").read()
old = '"state": {"block_sizes": [16], "num_warps": 4, "num_stages": 3, "indexing": "pointer"},  # [V tile]'
assert text.count(old) == 1
open(".carry/calls/prefill_w8.py", "w").write(text.replace(old, old.replace('"num_warps": 4', '"num_warps": 8')))
PY
