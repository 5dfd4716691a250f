#!/usr/bin/env bash
# Builds the test control plane (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl) from the modules pinned in go.sum, once per machine, into a
# cache outside the repository keyed by this module's sources. Prints the bin directory.
#
# A cold build compiles a large part of Kubernetes; it runs under `nice` so the rest of a
# 2-core machine keeps going. A warm call only checks the cache and returns at once.
#   testbin/build.sh            build when needed; print .../kruntimes-testbin/<key>/bin
#   testbin/build.sh --print    never build: print the bin directory, or exit 4 if not built
#   KRUNTIMES_TESTBIN_CACHE=DIR overrides where the cache lives.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here"

components=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl)

# Go's own tarball installs to /usr/local/go, which a non-login shell may not have on PATH.
if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
  PATH="$PATH:/usr/local/go/bin"
fi
if ! command -v go >/dev/null 2>&1; then
  echo "testbin: Go is not installed; the real-server tests need it to build the control plane" >&2
  exit 3
fi

# Stamp the release's version, as its own build does, so /version and kubectl report it.
release="$(sed -n 's/^[[:space:]]*k8s.io\/kubernetes \(v[0-9.]*\)$/\1/p' go.mod)"
minor="$(echo "$release" | cut -d. -f2)"
stamp=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  stamp+=" -X $pkg.gitVersion=$release -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
done
flags=(-trimpath "-ldflags=-s -w$stamp")

# The key covers everything that decides the binaries: the pins, our mains, the build
# flags and the Go toolchain.
key="$( { go version; echo "${flags[@]}"; cat go.mod go.sum; find cmd -name '*.go' | LC_ALL=C sort | xargs cat; } \
  | sha256sum | cut -c1-16)"
cache="${KRUNTIMES_TESTBIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kruntimes-testbin}"
bin="$cache/$key/bin"

built() {
  local c
  for c in "${components[@]}"; do [ -x "$bin/$c" ] || return 1; done
}

if built; then
  echo "$bin"
  exit 0
fi
if [ "${1:-}" = "--print" ]; then
  exit 4
fi

mkdir -p "$cache"
# One build at a time per machine: a second caller waits and then finds the cache filled.
exec 9>"$cache/.lock"
flock 9
if built; then
  echo "$bin"
  exit 0
fi

echo "testbin: building the control plane into $bin (once per machine; many minutes on 2 cores)" >&2
staging="$(mktemp -d "$cache/.build.XXXXXX")"
trap 'rm -rf "$staging"' EXIT
start=$SECONDS
export GOTOOLCHAIN=local GOFLAGS=-mod=readonly
nice -n 10 go build "${flags[@]}" -o "$staging/" ./cmd/...
mkdir -p "$cache/$key"
rm -rf "$bin"
mv "$staging" "$bin"
trap - EXIT
echo "testbin: built in $((SECONDS - start)) s" >&2
echo "$bin"
