"""Launch: the serve plan checked against SGLang's parser, `kdakit serve`, the run's keys, the host lock."""
