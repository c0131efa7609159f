"""kdakit.evals: GSM8K accuracy through lm-eval, fully offline."""
