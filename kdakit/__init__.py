"""kdakit: reproduce SGLang's Helion KDA numbers on your own GPU cluster."""

__version__ = "0.1.0"
