#!/usr/bin/env bash
# build-etcd.sh: build an etcd server binary of a given version from the Go
# module proxy, for the version-skew tests in internal/testbed/compat.
#
#   scripts/build-etcd.sh [--apt] VERSION [OUTDIR]
#
# VERSION is X.Y.Z (3.5.35, 3.6.16, 3.7.3) or X.Y for the newest X.Y.Z the
# proxy has (pre-releases ignored). The binary is OUTDIR/etcd-X.Y.Z; OUTDIR
# defaults to $(go env GOPATH)/leasehold-etcd, outside the repository.
#
# `go install go.etcd.io/etcd/server/v3@vX` is refused (the server module has
# replace directives), so the script builds a wrapper: a module of its own
# whose main calls etcdmain.Main(os.Args). Re-running replaces the binary.
#
# etcd 3.4 predates the server/v3 module and cannot be built this way. Use
# Debian's package (3.4.23, /usr/bin/etcd): `apt-get install -y etcd-server`,
# or run this script as root with --apt and VERSION 3.4 to have it install it.
#
# Then: LEASEHOLD_ETCD_BIN=<the printed path> go test ./internal/testbed/compat/ -v -count=1
set -euo pipefail

die() { echo "build-etcd: $*" >&2; exit 1; }
usage() { echo "usage: $0 [--apt] VERSION [OUTDIR]   (VERSION: X.Y.Z or X.Y, e.g. 3.5 3.6.16 3.7.3; 3.4: see --apt)" >&2; exit 2; }

apt=0
if [[ "${1:-}" == "--apt" ]]; then apt=1; shift; fi
[[ $# -ge 1 && $# -le 2 ]] || usage
version="${1#v}"
command -v go >/dev/null || die "go is not on PATH"

case "$version" in
3.4 | 3.4.*)
	want=3.4.23
	if [[ "$version" != 3.4 && "$version" != "$want" ]]; then
		die "etcd $version cannot be built from the module proxy (3.4 has no server/v3 module); Debian's etcd-server package is $want"
	fi
	bin=/usr/bin/etcd # Debian's path; an etcd earlier on PATH may be another version
	if ! "$bin" --version 2>/dev/null | grep -q "^etcd Version: 3\.4\."; then
		if [[ $apt -eq 0 ]]; then
			die "etcd 3.4 comes from Debian: run 'apt-get install -y etcd-server' (as root), or '$0 --apt 3.4' as root"
		fi
		[[ $(id -u) -eq 0 ]] || die "--apt needs root"
		if ! apt-get install -y etcd-server; then
			{ apt-get update && apt-get install -y etcd-server; } || die "apt-get install -y etcd-server failed"
		fi
		# The package enables a systemd unit (inert without systemd); the
		# tests start their own process on free ports in any case.
	fi
	"$bin" --version 2>/dev/null | grep -q "^etcd Version: 3\.4\." ||
		die "$bin is not etcd 3.4: $("$bin" --version 2>&1 | head -1)"
	echo "etcd 3.4 (Debian etcd-server): $bin"
	"$bin" --version
	echo
	echo "LEASEHOLD_ETCD_BIN=$bin go test ./internal/testbed/compat/ -v -count=1"
	exit 0
	;;
[0-9]*.[0-9]*.[0-9]*) ;;
[0-9]*.[0-9]*)
	series="$version"
	versions=$(GOFLAGS='' GOWORK=off go list -m -versions go.etcd.io/etcd/server/v3) ||
		die "cannot list go.etcd.io/etcd/server/v3 versions from $(go env GOPROXY)"
	version=$(tr ' ' '\n' <<<"$versions" | sed -n "s/^v\(${series//./\\.}\.[0-9][0-9]*\)$/\1/p" | sort -t. -k3,3n | tail -1)
	[[ -n "$version" ]] || die "the module proxy has no release of go.etcd.io/etcd/server/v3 in $series (it has: ${versions#* })"
	echo "build-etcd: newest $series release on the proxy: $version"
	;;
*) usage ;;
esac
[[ "$version" =~ ^3\.([5-9]|[1-9][0-9])\.[0-9]+$ ]] || die "etcd $version: want a release X.Y.Z of 3.5 or later (3.4 and earlier have no server/v3 module)"

outdir="${2:-$(go env GOPATH)/leasehold-etcd}"
mkdir -p "$outdir" || die "cannot create $outdir"
outdir=$(cd "$outdir" && pwd)
out="$outdir/etcd-$version"

work=$(mktemp -d "${TMPDIR:-/tmp}/build-etcd.XXXXXX")
trap 'rm -rf "$work" "$out.tmp"' EXIT
cd "$work"
cat >main.go <<'EOF'
// Command etcd is the etcd server, built from the Go module proxy by
// leasehold's scripts/build-etcd.sh.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
EOF

# A module of its own: no workspace, no vendor dir, no -mod flag of the caller.
export GOWORK=off GOFLAGS=-mod=mod
step() { echo "+ $*" >&2; "$@" || die "'$*' failed (etcd $version)"; }
step go mod init leasehold.local/etcd-"$version" 2>/dev/null
step go get "go.etcd.io/etcd/server/v3@v$version"
step go mod tidy
got=$(go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)
[[ "$got" == "v$version" ]] || die "resolved go.etcd.io/etcd/server/v3 $got, want v$version"
api=$(go list -m -f '{{.Version}}' go.etcd.io/etcd/api/v3)
[[ "$api" == "v$version" ]] || die "go.etcd.io/etcd/api/v3 resolved to $api, not v$version: the module versions are skewed"

# Same binary name for every version; build to a temporary name and rename,
# so an interrupted run never leaves a broken binary behind.
step go build -trimpath -ldflags "-X go.etcd.io/etcd/api/v3/version.GitSHA=module-proxy" -o "$out.tmp" .
mv -f "$out.tmp" "$out"

reported=$("$out" --version) || die "$out --version failed"
grep -q "^etcd Version: $version\$" <<<"$reported" || die "$out reports a different version: $(head -1 <<<"$reported")"
echo "built $out"
echo "$reported"
echo
echo "LEASEHOLD_ETCD_BIN=$out go test ./internal/testbed/compat/ -v -count=1"
