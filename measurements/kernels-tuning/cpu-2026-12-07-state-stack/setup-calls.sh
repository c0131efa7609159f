# On the CPU machine, from the repository root, after ../cpu-2026-12-06-next-calls/setup-calls.sh: the stacked
# state pass variants as module copies for cprobe.py, and a kdakit wheel with stack2m adopted (the tree of
# 2bf6f3a, which the diffs are against, with state-stack2m.diff applied) in .carry/stackwheel for call.sh.
set -eu
D=measurements/kernels-tuning/cpu-2026-12-07-state-stack
for v in stack1 stack2d stack2m; do
  git show 2bf6f3a:kernels/prefill.py > .carry/calls/prefill_$v.py
  patch -s .carry/calls/prefill_$v.py $D/state-$v.diff
done
tree=$(mktemp -d)
git archive 2bf6f3a | tar -x -C "$tree"
patch -s -d "$tree" -p1 < $D/state-stack2m.diff
rm -rf .carry/stackwheel .carry/vtwheel && mkdir -p .carry/stackwheel
python3 -m pip wheel -q --no-deps -w .carry/stackwheel "$tree" > /dev/null
rm -rf "$tree"
