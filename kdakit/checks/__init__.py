"""Checks: is a host (preflight), its interconnect (health) or an image (selftest) ready for a run?"""
