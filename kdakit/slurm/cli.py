"""`kdakit slurm ...`: the A/B, its single steps and the preflight as Slurm jobs (the make targets with
SCHEDULER=slurm call these; slurm/README.md tells the whole path)."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from kdakit.facts import profiles
from kdakit.facts.errors import UsageError
from kdakit.slurm import jobs, run, script, settings


def _context(args) -> run.Context:
    loaded = settings.load(args.settings or None, args.set_values)
    return run.Context(
        settings=loaded,
        slurm=jobs.Slurm(),
        results=Path(args.results).resolve(),
        run_id=args.run_id,
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


def _ab(args) -> bool:
    return run.ab(_context(args), args.arms.split(), args.protocol)


def _deploy(args) -> bool:
    return run.deploy(_context(args), args.arm, args.protocol)


def _step(args) -> bool:
    return run.step(_context(args), args.arm, args.step, args.protocol)


def _collect(args) -> bool:
    return run.collect(_context(args), args.arm)


def _teardown(args) -> bool:
    return run.teardown(_context(args), args.arm or None)


def _script(args) -> bool:
    ctx = _context(args)
    visit = ctx.visit(
        args.arm, tuple(args.steps.split(",")), bench_protocol=args.protocol, nodelist=args.nodelist
    )
    print(script.render(ctx.settings, visit), end="")
    return True


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
    checks.append((up, "slurmctld", " ".join(said[0].split()) if up else said[-1].strip()))
    if s.partition:
        part = subprocess.run(
            ["scontrol", "show", "partition", "-o", s.partition], capture_output=True, text=True
        )
        fields = jobs.parse_fields(part.stdout) if part.returncode == 0 else {}
        ok = fields.get("State") == "UP"
        checks.append(
            (ok, "partition", f"{s.partition}: {fields.get('State', part.stderr.strip() or 'unknown')}")
        )
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
        visit = ctx.visit("triton", ("deploy", "eval-gsm8k", "bench"))
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
        q.add_argument("--run-id", required=True)
        q.add_argument("--sku", default=profiles.default_sku())
        q.add_argument("--protocol", default="pr", help="the serving protocol (bench/protocols.toml)")
        q.add_argument("--dry-run", action="store_true", help="print the job script; submit nothing")
        if arm is not None:
            q.add_argument("--arm", default=arm)
        q.set_defaults(func=_wrap(fn))
        return q

    q = common("ab", _ab, "A/B: one job per arm visit, interleaved on the same nodes", arm=None)
    q.add_argument("--arms", default="triton helion")
    common("deploy", _deploy, "start the server in a held job (returns once every node is ready or failed)")
    q = common("step", _step, "eval-gsm8k or bench in the held job (srun --overlap)")
    q.add_argument("step", choices=("eval-gsm8k", "bench"))
    common("collect", _collect, "scrub and record the results the nodes wrote to shared storage")
    q = common("teardown", _teardown, "cancel the run's jobs; each node's trap stops its server", arm="")
    q = common("script", _script, "print a visit's job script")
    q.add_argument("--steps", default="deploy,eval-gsm8k,bench")
    q.add_argument("--nodelist", default="")
    common(
        "preflight", _preflight, "check Slurm, the partition, the runtime and sbatch --test-only", arm=None
    )
