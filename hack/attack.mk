##@ Attack

# The automatic attacker (test/attack): a seeded generator of tokenless, stale and forged writes over every
# route of the covered resources, on the local control plane with the operator in process, the invariants
# checked after every step. make test runs its short fixed-seed run; this runs it for ATTACK_DURATION.
ATTACK_DURATION ?= 10m
ATTACK_SEED ?= 0
ATTACK_ARGS ?=

.PHONY: attack
attack: control-plane ## Run the automatic attacker for ATTACK_DURATION (default 10m) with ATTACK_SEED (0: random, printed; N replays); every violation prints its seed, step and replay command.
	KUBEBUILDER_ASSETS="$$(hack/control-plane.sh --path)" go test -count=1 -timeout 0 -run '^TestAttack$$' -v ./test/attack \
		-args -attack.seed=$(ATTACK_SEED) -attack.duration=$(ATTACK_DURATION) -attack.steps=0 $(ATTACK_ARGS)
