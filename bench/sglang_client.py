"""SGLang's benchmark client (`python -m sglang.benchmark.serving`, unchanged) with one difference: its
prefix-cache flush carries the admin key.

SGLang 0.5.23's client sends one key, $OPENAI_API_KEY, on every request, the flush included; a server with
`--admin-api-key` takes only the admin key on /flush_cache. The kit serves with both keys, so this wrapper
replaces the client's flush function with one that sends the admin key ($KDAKIT_ADMIN_API_KEY); every
measured request still goes through the client's own code. Without an admin key it is the client as is.
"""

from __future__ import annotations

import os

import requests
from sglang.benchmark import serving

from kdakit.launch import access

_client_flush = serving.flush_server_cache


def flush_with_admin_key(base_url: str, backend: str, flush_cache_timeout: float = 60.0) -> None:
    admin_key = os.environ.get(access.ADMIN_API_KEY_ENV)
    if not admin_key or not backend.startswith("sglang"):
        _client_flush(base_url, backend, flush_cache_timeout)
        return
    response = requests.post(
        base_url + "/flush_cache",
        headers={"Authorization": f"Bearer {admin_key}"},
        params={"timeout": flush_cache_timeout},
    )
    response.raise_for_status()


def main() -> None:
    serving.flush_server_cache = flush_with_admin_key
    serving.cli_main()


if __name__ == "__main__":
    main()
