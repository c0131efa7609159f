# Evaluation, serving benchmark and report targets against a server you already run (included by the root
# Makefile). The cluster-wide `eval-gsm8k` / `bench` targets (playbooks/) run these same commands on each host.

# The server's port is the launch profile's [deploy] port (defined there only), read when BASE_URL is used.
BASE_URL ?= http://127.0.0.1:$(shell $(PYTHON) -c 'from kdakit.facts import profiles; print(profiles.load("$(SKU)", "$(ARM)").deploy["port"])')
PROTOCOL ?= pr
RESULTS ?= results
RUN_ID ?=
EVAL_ARGS ?=
DATASET ?=
DATASET_PATH ?=
TOKENIZER ?=
BENCH_ARGS ?=

.PHONY: eval-gsm8k-local bench-local report report-sample
# The sample report's screenshot, kept in the docs for a reader (make report-sample rewrites it).
REPORT_SAMPLE_PNG ?= evals/report-sample.png

eval-gsm8k-local: setup ## GSM8K (offline) against BASE_URL: pr = SGLang's run_eval, lm-eval, full. Vars: BASE_URL=http://127.0.0.1:<profile port> PROTOCOL=pr|lm-eval|full RUN_ID= EVAL_ARGS="--runs 1 --limit 20"
	$(KDAKIT) eval gsm8k --base-url $(BASE_URL) --protocol $(PROTOCOL) \
	  $(if $(RUN_ID),--run-id $(RUN_ID)) $(EVAL_ARGS)

bench-local: setup ## Serving benchmark (SGLang's client) against BASE_URL. Vars: BASE_URL= PROTOCOL=pr|rigorous DATASET=sharegpt|random-ids DATASET_PATH= TOKENIZER= RUN_ID= BENCH_ARGS=
	$(KDAKIT) bench serving --base-url $(BASE_URL) --protocol $(PROTOCOL) \
	  $(if $(DATASET),--dataset $(DATASET)) $(if $(DATASET_PATH),--dataset-path $(DATASET_PATH)) \
	  $(if $(TOKENIZER),--tokenizer $(TOKENIZER)) $(if $(RUN_ID),--run-id $(RUN_ID)) $(BENCH_ARGS)

report: setup ## report.md + self-contained report.html from a results tree, and report.png (its top at 1280 px, where chromium is installed). Vars: RESULTS=results (or results/<run-id>)
	$(KDAKIT) report $(RESULTS)
	@$(PY) -m kdakit.report.screenshot $(RESULTS)/report.html $(RESULTS)/report.png \
	  || echo "report: no screenshot (install Debian's chromium); report.html is written"

report-sample: setup ## The report of a synthetic sample tree (every number made up) in .cache/report-sample, and its screenshot, kept at evals/report-sample.png (REPORT_SAMPLE_PNG)
	rm -rf .cache/report-sample
	$(PY) -m kdakit.report.sample .cache/report-sample
	$(MAKE) --no-print-directory report RESULTS=.cache/report-sample/sample-synthetic
	cp .cache/report-sample/sample-synthetic/report.png $(REPORT_SAMPLE_PNG)
