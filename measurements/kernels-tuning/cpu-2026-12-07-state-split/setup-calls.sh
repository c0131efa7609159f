# On the CPU machine, from the repository root, after ../cpu-2026-12-06-next-calls/setup-calls.sh: the state
# pass as chain and output programs (split.diff, against kernels/prefill.py at 177dbff) as module copies for
# cprobe.py, prefill_side at the module's 16-wide default tile and prefill_side32 at 32; and a kdakit wheel
# of 177dbff with all three diffs applied in .carry/splitwheel for call-served.sh.
set -eu
D=measurements/kernels-tuning/cpu-2026-12-07-state-split
tree=$(mktemp -d)
git archive 177dbff | tar -x -C "$tree"
(cd "$tree" && patch -s -p1 < "$OLDPWD/$D/split.diff" && patch -s -p1 < "$OLDPWD/$D/interpret.diff" \
  && patch -s -p1 < "$OLDPWD/$D/tools.diff")
cp "$tree/kernels/prefill.py" .carry/calls/prefill_side.py
python3 - "$tree/kernels/prefill.py" .carry/calls/prefill_side32.py <<'PY'
import sys
default = '"state": {"block_sizes": [16], "num_warps": 4, "num_stages": 3, "indexing": "pointer"}'
text = open(sys.argv[1]).read()
assert text.count(default) == 1
open(sys.argv[2], "w").write(text.replace(default, default.replace("[16]", "[32]")))
PY
rm -rf .carry/splitwheel .carry/stackwheel && mkdir -p .carry/splitwheel
python3 -m pip wheel -q --no-deps -w .carry/splitwheel "$tree" > /dev/null
rm -rf "$tree"
