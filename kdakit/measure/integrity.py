"""Did anyone but the kit reach the server during a measured run?

Before and after each measured run the kit reads the server's own count of requests it processed (SGLang's
`sglang:num_requests_total` on /metrics, present with `--enable-metrics`, which the launch profile sets) and
compares the difference with the number of requests its client sent. More on the server's side means
requests from someone else landed inside the measurement window: the run fails with one line.
"""

from __future__ import annotations

import re
import urllib.error
import urllib.request
from dataclasses import dataclass

from kdakit.launch import access

REQUEST_COUNTER = "sglang:num_requests_total"
# One sample line of the counter: name, optional {labels}, value (Prometheus text format).
_SAMPLE = re.compile(rf"^{re.escape(REQUEST_COUNTER)}(?:\{{[^}}]*\}})?\s+(\S+)")


def parse_request_count(text: str) -> float | None:
    """The counter summed over its label sets (streaming or not, per model); None when absent."""
    values = [float(m[1]) for line in text.splitlines() if (m := _SAMPLE.match(line))]
    return sum(values) if values else None


def read_request_count(base_url: str, timeout: float = 10.0) -> float | None:
    request = urllib.request.Request(f"{base_url}/metrics", headers=access.auth_headers())
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return parse_request_count(response.read().decode(errors="replace"))
    except (urllib.error.URLError, OSError, ValueError):
        return None


NOT_READ = {"sent": 0, "server": None, "foreign": None}  # a run whose counter was not compared


@dataclass
class Window:
    """One measured run's view of the server's counter."""

    base_url: str
    before: float | None = None

    def __enter__(self) -> Window:
        self.before = read_request_count(self.base_url)
        return self

    def __exit__(self, *exc) -> None:
        return None

    def check(self, sent: int) -> dict:
        """{'sent', 'server', 'foreign'} ('server' and 'foreign' None when the counter is not readable)."""
        after = read_request_count(self.base_url)
        if self.before is None or after is None:
            return {"sent": sent, "server": None, "foreign": None}
        server = int(round(after - self.before))
        return {"sent": sent, "server": server, "foreign": max(0, server - sent)}


def foreign_line(where: str, foreign: int) -> str:
    """The line a user sees; where is e.g. 'h1: 4096/1024 C16 run 2'."""
    return f"{where}: {foreign} requests not sent by the kit reached the server during the run"


UNCHECKED_NOTE = (
    f"the server's request counter ({REQUEST_COUNTER} on /metrics) was not readable: no check that only the "
    "kit's requests reached the server during the measured runs (start it with --enable-metrics)"
)
