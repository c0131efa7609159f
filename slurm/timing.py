"""How long a Slurm job asks for, and whether the site allows it.

`--time` is the run's expected duration plus a stated margin (time_margin), capped by the site
(max_time); a partition whose MaxTime is below that is refused with one line before anything is
submitted. The expected duration is a model with its rates in the site settings: the server's start
(expected_ready_s), every GSM8K and bench client run at the site's expected prefill and per-request decode
rates, and the graceful stop of each visit's server; its numbers are printed in the script's header.
"""

from __future__ import annotations

import math
import re

from kdakit.slurm.settings import SlurmSettings

from kdakit.facts.errors import UsageError

_UNLIMITED = ("UNLIMITED", "INFINITE", "")


def parse_slurm_time(text: str) -> float | None:
    """Slurm's time (MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS) -> seconds; None for UNLIMITED."""
    text = text.strip()
    if text.upper() in _UNLIMITED:
        return None
    try:
        if "-" in text:
            days, rest = text.split("-", 1)
            h, m, s = ([float(p) for p in rest.split(":")] + [0.0, 0.0])[:3]
            return float(days) * 86400 + h * 3600 + m * 60 + s
        parts = [float(p) for p in text.split(":")]
    except ValueError:
        raise UsageError(f"slurm: {text!r} is not a Slurm time ([D-]HH:MM:SS)") from None
    h, m, s = {1: (0.0, parts[0], 0.0), 2: (0.0, *parts), 3: tuple(parts)}.get(len(parts), (0, 0, 0))
    return h * 3600 + m * 60 + s


def slurm_time(seconds: float) -> str:
    """Seconds -> Slurm's D-HH:MM:SS (rounded up to a whole minute: Slurm counts minutes)."""
    minutes = -(-int(math.ceil(seconds)) // 60)
    days, rest = divmod(minutes, 24 * 60)
    return f"{days}-{rest // 60:02d}:{rest % 60:02d}:00"


def expand_nodelist(nodelist: str) -> list[str]:
    """'gpu[01-02,05],cpu1' -> ['gpu01', 'gpu02', 'gpu05', 'cpu1'] (Slurm's host list syntax)."""
    out = []
    for m in re.finditer(r"([^,\[]+)(?:\[([^\]]*)\])?([^,]*)", nodelist):
        prefix, ranges, suffix = m.group(1), m.group(2), m.group(3)
        if ranges is None:
            out.append(prefix + suffix)
            continue
        for part in ranges.split(","):
            lo, _, hi = part.partition("-")
            for i in range(int(lo), int(hi or lo) + 1):
                out.append(f"{prefix}{str(i).zfill(len(lo))}{suffix}")
    return [n for n in out if n]


def nodelist_of(settings: SlurmSettings) -> str:
    """The nodelist the job asks for: the nodelist setting, or a --nodelist/-w among extra_sbatch."""
    if settings.nodelist:
        return settings.nodelist
    for opt in settings.extra_sbatch:
        m = re.fullmatch(r"(?:--nodelist=|-w=?)(\S+)", opt)
        if m:
            return m.group(1)
    return ""


def check_nodes(settings: SlurmSettings) -> None:
    """nodes and nodelist must agree (Slurm rejects --nodes=1 with two nodes listed, at submit time)."""
    nodelist = nodelist_of(settings)
    if not nodelist:
        return
    named = expand_nodelist(nodelist)
    if len(named) != settings.nodes:
        raise UsageError(
            f"slurm: nodes = {settings.nodes} but nodelist {nodelist} names {len(named)} node(s): set "
            f"nodes = {len(named)} or list {settings.nodes} node(s)"
        )


def _bench_run_s(settings: SlurmSettings, point) -> float:
    waves = math.ceil(point.num_prompts / point.concurrency)
    prefill = point.concurrency * point.input_len / settings.expected_prefill_tok_s
    return waves * (prefill + point.output_len / settings.expected_decode_tok_s)


def expected_visit_s(settings: SlurmSettings, bench_protocol, gsm8k_protocol, first: bool) -> float:
    """One arm's visit: start, GSM8K (first visit only), every bench run (with warm-up), graceful stop."""
    total = settings.expected_ready_s + settings.stop_grace_s
    if first and gsm8k_protocol is not None:
        questions = gsm8k_protocol.limit or 1319
        waves = math.ceil(questions / max(gsm8k_protocol.num_concurrent, 1))
        total += (
            gsm8k_protocol.runs * waves * settings.expected_answer_tokens / settings.expected_decode_tok_s
        )
    for point in bench_protocol.points:
        total += (bench_protocol.runs + int(bench_protocol.warmup)) * _bench_run_s(settings, point)
    return total


def time_limit(settings: SlurmSettings, expected_s: float, what: str) -> tuple[str, str]:
    """(--time, the header line that says how): the settings' time_limit when set, else expected x (1 +
    margin) + the signal lead, capped at max_time."""
    if settings.time_limit:
        return settings.time_limit, f"--time: time_limit = {settings.time_limit} (site setting)"
    want = expected_s * (1 + settings.time_margin) + settings.signal_lead_s
    note = (f"--time: {what} expected {slurm_time(expected_s)} + {settings.time_margin:.0%} margin + "
            f"{settings.signal_lead_s} s signal lead = {slurm_time(want)}")  # fmt: skip
    cap = parse_slurm_time(settings.max_time) if settings.max_time else None
    if cap is not None and want > cap:
        want = cap
        note += f", capped at the site's max_time {settings.max_time}"
    return slurm_time(want), note


def check_partition_limit(limit: str, partition: str, max_time: str | None) -> None:
    """Refuse, in one line, a job whose --time is above the partition's MaxTime (scontrol's word)."""
    allowed = parse_slurm_time(max_time or "")
    asked = parse_slurm_time(limit)
    if allowed is not None and asked is not None and asked > allowed:
        raise UsageError(
            f"slurm: the run asks --time={limit} but partition {partition or '(default)'} allows at most "
            f'{max_time}: set max_time = "{max_time}" in the Slurm settings (the run may then end at the '
            "limit; a sequential protocol stops earlier) or pick a shorter protocol"
        )
