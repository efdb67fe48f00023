##@ Model

# The Promela model of fencekit's protocol (model/fencekit.pml, docs/model.md), checked with spin
# (Debian package spin, which needs gcc).

.PHONY: model
model: ## Check the protocol model with spin: verify the design, refute each mutation and print its trail as a story (about 8 min of CPU, so about 4 min on an idle 2-core machine: two checks at a time).
	@command -v spin >/dev/null || { echo "model: spin is not on PATH: apt-get install -y spin (it needs gcc)"; exit 1; }
	go run ./model/cmd/model

.PHONY: model-full
model-full: ## Check the protocol model with the long design checks too (policy widening, deletes: minutes each).
	@command -v spin >/dev/null || { echo "model: spin is not on PATH: apt-get install -y spin (it needs gcc)"; exit 1; }
	go run ./model/cmd/model -full
