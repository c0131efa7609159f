"""`kdakit slurm ...`: the A/B, its single steps and the preflight as Slurm jobs (the make targets with
SCHEDULER=slurm call these; slurm/README.md tells the whole path)."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from kdakit.slurm import jobs, run, script, settings, timing

from kdakit.facts import profiles
from kdakit.facts.errors import UsageError
from kdakit.records import controller_files, paths
from kdakit.records.visits import plan_of as visits_plan


def _run_id(args) -> str:
    """deploy starts a run (a new id, written to LATEST); the other steps reuse LATEST's."""
    action = args.slurm_command
    if action == "teardown" and not args.run_id and paths.read_latest(args.results) is None:
        return "none"
    run_id = paths.resolve_run_id(args.results, args.run_id, new=action in ("deploy", "script", "preflight"))
    if action == "deploy" and not args.dry_run:
        try:
            controller_files.write_latest(args.results, run_id)
        except OSError as exc:
            raise UsageError(str(exc)) from None
    return run_id


def _context(args) -> run.Context:
    loaded = settings.load(args.settings or None, args.set_values)
    return run.Context(
        settings=loaded,
        slurm=jobs.Slurm(),
        results=Path(args.results).resolve(),
        run_id=_run_id(args),
        sku=args.sku,
        dry_run=args.dry_run,
    )


def _wrap(fn):
    def go(args) -> int:
        try:
            return 0 if fn(args) else 1
        except jobs.SlurmError as exc:
            raise UsageError(str(exc)) from None

    return go


def _deploy(args) -> bool:
    return run.deploy(_context(args), args.arm, args.protocol or "pr")


def _step(args) -> bool:
    return run.step(_context(args), args.arm, args.step, args.protocol or "pr")


def _collect(args) -> bool:
    return run.collect(_context(args), args.arm)


def _teardown(args) -> bool:
    return run.teardown(_context(args), args.arm or None)


def ab_visit(ctx: run.Context, arms: list[str], protocol: str) -> script.Visit:
    """The allocation of an A/B (what `kdakit run ab --scheduler slurm` submits)."""
    visits = visits_plan(protocol, ctx.settings.bench_protocols).visits
    return ctx.visit(arms[0], (), arms=tuple(arms), visits=visits, bench_protocol=protocol)


def _script(args) -> bool:
    ctx = _context(args)
    arms = args.arms.split() if args.arms else list(profiles.ab_arms())
    published = profiles.ab_protocols(arms) or {}  # a published A/B's protocols, as `kdakit run` picks them
    if published.get("gsm8k"):
        ctx.settings.gsm8k_protocol = published["gsm8k"]
    protocol = args.protocol or published.get("bench") or "pr"
    print(script.render(ctx.settings, ab_visit(ctx, arms, protocol)), end="")
    return True


def args_protocol(ctx: run.Context) -> str:
    return getattr(ctx, "protocol", "") or "pr"


CONTROLLER_FIX = (
    "Fix: run it on a login node of the cluster, whose slurm.conf (or SLURM_CONF=<file>) names the "
    "controller; the site's settings (partition, runtime, image) go in slurm/site.toml, made from "
    "slurm/site.example.toml"
)


def preflight_checks(ctx: run.Context) -> list[tuple[bool, str, str]]:
    """(ok, check, detail): Slurm's commands and controller, the partition, the container runtime, and
    sbatch --test-only of an A/B visit's script."""
    s, checks = ctx.settings, []
    missing = [c for c in ("sbatch", "srun", "squeue", "scontrol", "scancel") if shutil.which(c) is None]
    checks.append((not missing, "slurm-commands", f"missing: {', '.join(missing)}" if missing else "on PATH"))
    if missing:
        return checks
    ping = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, timeout=60)
    up = ping.returncode == 0 and "UP" in ping.stdout
    said = (ping.stdout.strip() or ping.stderr.strip() or "no answer").splitlines()
    checks.append(
        (up, "slurmctld", " ".join(said[0].split()) if up else f"{said[-1].strip()}. {CONTROLLER_FIX}")
    )
    if s.partition:
        fields = ctx.slurm.partition(s.partition)
        ok = fields.get("State") == "UP"
        checks.append((ok, "partition", f"{s.partition}: {fields.get('State', 'unknown')}"))
    if s.runtime == "pyxis":
        help_text = subprocess.run(["srun", "--help"], capture_output=True, text=True).stdout
        checks.append(
            (
                "--container-image" in help_text,
                "pyxis",
                "srun --container-image "
                + ("available" if "--container-image" in help_text else "unknown: is pyxis installed?"),
            )
        )
        checks.append((Path(s.squashfs).is_file(), "squashfs", s.squashfs + ("" if Path(s.squashfs).is_file()
                       else ": missing (make image-squashfs)")))  # fmt: skip
    elif s.image_tarball:
        ok = Path(s.image_tarball).is_file() and Path(s.image_tarball + ".id").is_file()
        checks.append((ok, "image-tarball", s.image_tarball + ("" if ok else ": missing it or its .id")))
    if up:
        visit = ab_visit(ctx, list(profiles.ab_arms()), args_protocol(ctx))
        limit = script.time_limit(s, visit)[0]
        fields = ctx.slurm.partition(s.partition)
        try:
            timing.check_partition_limit(
                limit, fields.get("PartitionName", s.partition), fields.get("MaxTime")
            )
            checks.append((True, "time-limit", f"--time={limit} within MaxTime {fields.get('MaxTime', '?')}"))
        except UsageError as exc:
            checks.append((False, "time-limit", str(exc)))
        run.prepare(ctx)
        path = run.write_script(ctx, visit)
        try:
            checks.append((True, "sbatch-test-only", ctx.slurm.test_only(str(path))))
        except jobs.SlurmError as exc:
            checks.append((False, "sbatch-test-only", str(exc)))
    return checks


def _preflight(args) -> bool:
    ctx = _context(args)
    with tempfile.TemporaryDirectory(prefix="kdakit-slurm-preflight-") as scratch:
        ctx.results = Path(scratch)  # the checked script is not a result
        checks = preflight_checks(ctx)
    for ok, name, detail in checks:
        print(f"{'ok  ' if ok else 'FAIL'} {name}: {detail}")
    return all(ok for ok, _, _ in checks)


def register(sub) -> None:
    p = sub.add_parser("slurm", help="run the A/B, its steps and the preflight as Slurm jobs")
    steps = p.add_subparsers(dest="slurm_command", required=True, metavar="ACTION")

    def common(name: str, fn, help_: str, arm: str | None = "helion"):
        q = steps.add_parser(name, help=help_)
        q.add_argument("--settings", default="", help="the site's Slurm settings (slurm/site.example.toml)")
        q.add_argument("--set", dest="set_values", action="append", default=[], metavar="KEY=VALUE",
                       help="override one setting (repeatable)")  # fmt: skip
        q.add_argument("--results", default="results", help="results folder on storage every node mounts")
        q.add_argument("--run-id", default="", help="default: new for deploy, else results/LATEST")
        q.add_argument("--sku", default=profiles.default_sku())
        q.add_argument("--protocol", default="", help="serving protocol (default pr, or a published A/B's)")
        q.add_argument("--dry-run", action="store_true", help="print the job script; submit nothing")
        if arm is not None:
            q.add_argument("--arm", default=arm)
        q.set_defaults(func=_wrap(fn))
        return q

    common("deploy", _deploy, "start the server in a held job (returns once every node is ready or failed)")
    q = common("step", _step, "eval-gsm8k or bench in the held job (srun --overlap)")
    q.add_argument("step", choices=("eval-gsm8k", "bench"))
    common("collect", _collect, "scrub and record the results the nodes wrote to shared storage")
    q = common("teardown", _teardown, "cancel the run's jobs; each node's trap stops its server", arm="")
    q = common("script", _script, "print the A/B allocation's job script", arm=None)
    q.add_argument("--arms", default="", help="the arms in order (default: arms.toml's ab)")
    common(
        "preflight", _preflight, "check Slurm, the partition, the runtime and sbatch --test-only", arm=None
    )
