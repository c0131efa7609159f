"""kdakit.bench: serving throughput through SGLang's own benchmark client."""
