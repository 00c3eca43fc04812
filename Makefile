# The README's two commands: `make demo` and `make test`. Each first builds .venv from
# requirements.lock (hash-checked) when .venv is missing or older than the lock or
# pyproject.toml, then runs. Only Python >= 3.11 and make are needed.
#
#   make test ARGS="-k approvals -x"    pass options to pytest
#   make lock                           re-resolve the lock after editing pyproject.toml
#   make lock-upgrade                   move every pin to the newest release the ranges allow

PYTHON ?= python3
VENV ?= .venv
ARGS ?=
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip --disable-pip-version-check --quiet
LOCK_TOOLS := .venv-lock
PIP_TOOLS := pip-tools==7.6.2
COMPILE := pip-compile --quiet --extra test --generate-hashes --strip-extras \
	--no-emit-index-url --no-emit-find-links --output-file requirements.lock pyproject.toml

.PHONY: demo test lock lock-upgrade

demo: $(VENV)/.project
	SIGNOFF_ENV=development $(BIN)/signoff demo

test: $(VENV)/.project
	$(BIN)/pytest -q -n 3 --dist loadfile $(ARGS)

# A changed lock rebuilds the environment from scratch, so it holds exactly what is locked.
$(VENV)/.locked: requirements.lock
	rm -rf $(VENV)
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --require-hashes --no-deps -r requirements.lock
	touch $@

$(VENV)/.project: $(VENV)/.locked pyproject.toml
	$(PIP) install --no-deps -e .
	$(BIN)/python -m pip check
	touch $@

$(LOCK_TOOLS)/bin/pip-compile:
	$(PYTHON) -m venv $(LOCK_TOOLS)
	$(LOCK_TOOLS)/bin/python -m pip install --quiet "$(PIP_TOOLS)"

lock: $(LOCK_TOOLS)/bin/pip-compile
	$(LOCK_TOOLS)/bin/$(COMPILE)

lock-upgrade: $(LOCK_TOOLS)/bin/pip-compile
	$(LOCK_TOOLS)/bin/$(COMPILE) --upgrade
