"""Facts every layer may read, the kernels included: pins.toml's reader, the launch profiles and SKU registry
(profiles/*.toml), and the CLI's error. Imports only the standard library."""
