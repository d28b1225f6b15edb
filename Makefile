# anvil: two commands matter, `make demo` and `make test`. Each sets up .venv the first time.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
WARM := $(VENV)/.warm

.PHONY: demo test fuzz test-real lint clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

# the tests' bytecode cache, filled once per venv (tests/shards.py --warm says why)
$(WARM): $(STAMP)
	$(BIN)/python tests/shards.py --warm
	touch $(WARM)

demo: $(STAMP)
	$(BIN)/python -m anvil_metrics demo

# every test, in JOBS pytest processes at once (tests/shards.py says why not pytest-xdist);
# `$(BIN)/python -m pytest` runs them in one process
JOBS ?= 4
test: $(WARM)
	$(BIN)/python tests/shards.py --jobs $(JOBS)

# the property tests at their full example counts (`make test` tries a quarter: tests/fuzzing.py)
fuzz: $(STAMP)
	ANVIL_FUZZ=full $(BIN)/python -m pytest -q -p no:cacheprovider $$(grep -rl 'examples(' tests/unit tests/e2e)

# A real OpenAI-compatible server with a tiny local model (tests/realserver/):
# SERVER=transformers (~4 min set-up once), vllm (~13 min once), llama (~40 min build once).
test-real: $(STAMP)
	bash tests/realserver/run_real.sh $(SERVER)

lint: $(STAMP)
	$(BIN)/ruff check anvil_metrics locustfiles tests benchmarks

clean:
	rm -rf $(VENV) build *.egg-info
