#!/usr/bin/env bash
# Compiles what the VM runs, on this side (go test -c): the test binaries of
# the packages .ci/vm/plan sends to the VM, and nsexec's static rootfs probe.
# Shared by `make vm-test` (run.sh) and `make vagrant-test` (vagrant-run.sh),
# and used in a Vagrant guest that has Go (the public boxes) too. Compiling
# in a guest under TCG is slow (the probe alone took 90 to 190 s), so the
# runners here build on the host and hand the result over.
#
# Usage: build-tests.sh OUT
#   OUT/bin/NAME.test          one per planned package (NAME: the package
#                              path with / as _, root for the module's top)
#   OUT/fixtures/rootfsprobe   for MOAT_NSEXEC_TEST_PROBE
#   OUT/pkgs.txt               "NAME DIR SKIP" per binary (SKIP: the plan's
#                              -test.skip regexp, - for none)
# A test package without a line in the plan stops the build, so every new
# package gets a decision. MOAT_VM_PKGS (a regexp on NAME) keeps only some,
# for debugging.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
out=${1:?usage: build-tests.sh OUT}
mkdir -p "$out/bin" "$out/fixtures"
export PATH=/usr/local/go/bin:$PATH

declare -A where skip
while read -r pname pwhere pskip _why; do
  [[ -z $pname || $pname == \#* ]] && continue
  where[$pname]=$pwhere
  skip[$pname]=$pskip
done <"$here/plan"
cd "$repo"
# -buildvcs=false: a synced copy of the tree (a Vagrant guest) has no .git.
mod=$(go list -m)
hostonly=()
: >"$out/pkgs.txt"
while read -r pkg; do
  rel=${pkg#"$mod"}
  rel=${rel#/}
  rel=${rel:-.}
  name=$(echo "$rel" | tr / _)
  [ "$name" = . ] && name=root
  case ${where[$name]:-} in
    vm) ;;
    host) hostonly+=("$name"); continue ;;
    *) echo "build-tests: the test package $rel ($name) has no line in .ci/vm/plan: say whether it runs in the VM and why" >&2; exit 1 ;;
  esac
  [[ $name =~ ${MOAT_VM_PKGS:-.} ]] || continue
  # nsexec's binary is static, as the release binaries are, so that the VM
  # tests the C tail of prepared sandboxes (nsexec/tail_linux.go) on the
  # stock kernel; the host suite tests both builds.
  static=()
  [ "$name" = nsexec ] && static=(-tags osusergo,netgo -ldflags '-linkmode external -extldflags -static')
  go test -buildvcs=false "${static[@]}" -c -o "$out/bin/$name.test" "$pkg"
  echo "$name $rel ${skip[$name]}" >>"$out/pkgs.txt"
done < <(go list -buildvcs=false -f '{{if or .TestGoFiles .XTestGoFiles}}{{.ImportPath}}{{end}}' ./...)
echo "build-tests: host suite only (.ci/vm/plan): ${hostonly[*]:-none}"
# nsexec's rootfs fixture is a static Go program.
(cd nsexec/testdata/rootfsprobe && CGO_ENABLED=0 GOWORK=off GOFLAGS= go build -buildvcs=false -trimpath -o "$out/fixtures/rootfsprobe" .)
