"""kdakit.kernels: our own Helion KDA kernels, their fp64 reference and microbenchmarks."""
