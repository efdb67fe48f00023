#!/usr/bin/env bash
# control-plane.sh builds kube-apiserver, kube-controller-manager and etcd from the Go module proxy and caches
# them outside the repository, so that envtest (KUBEBUILDER_ASSETS), `make run`, `make demo` and every clean
# clone on this machine share one copy. There is no container engine and no download site: everything comes from the
# Go module proxy.
#
#   hack/control-plane.sh                          build what is missing, then print the assets directory
#   hack/control-plane.sh --no-controller-manager  the same without kube-controller-manager (make demo, make run)
#   hack/control-plane.sh --path                   print the assets directory only (builds nothing)
#
# kube-controller-manager is not part of envtest's control plane; test/cluster and test/util/testenv start it next
# to the envtest apiserver so that the cluster's own controllers run against fencekit's admission. The demo and
# the dev cluster run none, so make demo and make run do not build it.
#
# Idempotent: a second run finds every binary, checks their versions and does nothing.
set -euo pipefail

K8S_VERSION="${FENCEKIT_K8S_VERSION:-1.37.2}"
ETCD_VERSION="${FENCEKIT_ETCD_VERSION:-3.6.16}"
STAGING_VERSION="v0.${K8S_VERSION#1.}"
ASSETS="${FENCEKIT_ASSETS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/fencekit/k8s-${K8S_VERSION}}"

CONTROLLER_MANAGER=1
case "${1:-}" in
  --path)
    echo "$ASSETS"
    exit 0
    ;;
  --no-controller-manager) CONTROLLER_MANAGER=0 ;;
  "") ;;
  *)
    echo "control-plane: unknown argument $1: want none, --no-controller-manager or --path" >&2
    exit 2
    ;;
esac

log() { echo "control-plane: $*" >&2; }
die() { echo "control-plane: error: $*" >&2; exit 1; }
START=$SECONDS
elapsed() { local s=$((SECONDS - START)); printf '%dm%02ds' $((s / 60)) $((s % 60)); }

# progress LABEL CMD...: runs CMD with its output in a file and, every 10 s while it runs, says how long
# the build has taken and what CMD is on (its last line of output: a package compiled with go build -v, a
# module downloaded). A cold build takes 5-25 minutes; it must never look hung.
progress() {
  local label=$1 out rc=0
  shift
  out="$(mktemp)"
  "$@" >"$out" 2>&1 &
  local pid=$! n=0
  while kill -0 "$pid" 2>/dev/null; do
    sleep 1
    n=$((n + 1))
    if ((n % 10 == 0)); then
      log "${label}: $(elapsed) elapsed, $(wc -l <"$out") steps, now: $(tail -n 1 "$out" | cut -c1-100)"
    fi
  done
  wait "$pid" || rc=$?
  if ((rc != 0)); then cat "$out" >&2; fi
  rm -f "$out"
  return "$rc"
}

command -v go >/dev/null || die "go is not on PATH; install Go 1.26"
mkdir -p "$ASSETS"
export GOFLAGS=-mod=mod GOWORK=off GOTOOLCHAIN=local CGO_ENABLED=0

# build_k8s NAME MINUTES: builds k8s.io/kubernetes/cmd/NAME at K8S_VERSION into $ASSETS/NAME, in a throwaway
# module whose staging replacements point at their STAGING_VERSION releases, with the version ldflags set so that
# `NAME --version` (and the apiserver's /version) reports K8S_VERSION. MINUTES is the first-build estimate the
# progress line announces. Skipped when the binary is present and reports the right version.
build_k8s() {
  local name=$1 minutes=$2 want="v${K8S_VERSION}"
  if [[ -x "$ASSETS/$name" ]] && [[ "$("$ASSETS/$name" --version 2>/dev/null)" == "Kubernetes ${want}" ]]; then
    log "${name} ${want} present in $ASSETS"
    return
  fi
  local work
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' RETURN
  log "building ${name} ${want} from the Go module proxy: ${minutes} the first time, cached afterwards"
  (
    cd "$work"
    go mod init "fencekit.local/${name}-build" >/dev/null 2>&1
    log "reading k8s.io/kubernetes@${want}'s go.mod for its staging replacements"
    local kmod
    kmod="$(go mod download -json "k8s.io/kubernetes@${want}" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')"
    [[ -f "$kmod" ]] || die "could not download the go.mod of k8s.io/kubernetes@${want}"
    # Every `path => ./staging/src/path` line becomes `path => path@STAGING_VERSION`.
    local replaces
    replaces="$(awk '$2 == "=>" && $3 ~ /^\.\/staging\// {print $1}' "$kmod")"
    [[ -n "$replaces" ]] || die "found no ./staging replacements in $kmod"
    local n=0
    for m in $replaces; do
      go mod edit -replace="${m}=${m}@${STAGING_VERSION}"
      n=$((n + 1))
    done
    log "replaced ${n} staging modules with their ${STAGING_VERSION} releases"
    go mod edit -require="k8s.io/kubernetes@${want}"
    progress "downloading ${name}'s modules" go get -tool "k8s.io/kubernetes/cmd/${name}@${want}" || die "go get k8s.io/kubernetes/cmd/${name} failed"
    progress "tidying" go mod tidy || die "go mod tidy failed"
    log "compiling ${name} (a progress line every 10 s)"
    progress "compiling ${name}" go build -v -trimpath -o "$ASSETS/${name}.tmp" \
      -ldflags "-X k8s.io/component-base/version.gitVersion=${want} -X k8s.io/component-base/version.gitMajor=${K8S_VERSION%%.*} -X k8s.io/component-base/version.gitMinor=$(echo "$K8S_VERSION" | cut -d. -f2)" \
      "k8s.io/kubernetes/cmd/${name}"
  ) || die "building ${name} ${want} failed (see the go output above)"
  mv "$ASSETS/${name}.tmp" "$ASSETS/${name}"
  log "${name} ${want} ready: $("$ASSETS/${name}" --version)"
}

build_etcd() {
  local want="${ETCD_VERSION}"
  if [[ -x "$ASSETS/etcd" ]] && [[ "$("$ASSETS/etcd" --version 2>/dev/null | head -n 1)" == "etcd Version: ${want}" ]]; then
    log "etcd ${want} present in $ASSETS"
    return
  fi
  local work
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' RETURN
  log "building etcd v${want} from the Go module proxy (about 30 seconds)"
  (
    cd "$work"
    go mod init fencekit.local/etcd-build >/dev/null 2>&1
    progress "downloading etcd's modules" go get -tool "go.etcd.io/etcd/server/v3@v${want}" || die "go get go.etcd.io/etcd/server/v3@v${want} failed"
    progress "tidying" go mod tidy || die "go mod tidy failed"
    progress "compiling etcd" go build -v -trimpath -o "$ASSETS/etcd.tmp" go.etcd.io/etcd/server/v3
  ) || die "building etcd v${want} failed (see the go output above)"
  mv "$ASSETS/etcd.tmp" "$ASSETS/etcd"
  log "etcd ready: $("$ASSETS/etcd" --version | head -1)"
}

# One build at a time: `go test ./...` starts a control plane per package, and each would build.
if command -v flock >/dev/null; then
  exec 9>"$ASSETS/.lock"
  flock -n 9 || { log "another build is under way; waiting for it"; flock 9; }
fi
build_etcd
build_k8s kube-apiserver "5-25 minutes on 2 cores (11 min measured on an idle machine)"
# kube-controller-manager shares most of kube-apiserver's packages: built second, it reuses the build cache.
if ((CONTROLLER_MANAGER)); then
  build_k8s kube-controller-manager "1.5 minutes measured on 2 cores after kube-apiserver (5 on a busy machine)"
fi
log "done in $(elapsed)"
echo "$ASSETS"
