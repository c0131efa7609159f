"""Measure: what the eval and bench harnesses share: run context, tool limits, server integrity, telemetry."""
