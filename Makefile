# moat: build and test entry points.
#
#   make build     go build -o bin/moat ./cmd/moat
#   make install   the static release binaries (.ci/build-static bin), moat,
#                  moat-init and moat-runtime, installed into $(PREFIX)/bin
#                  (default /usr/local/bin, the path the README's launcher
#                  snippet names); DESTDIR stages them elsewhere
#   make test      the CI suite on this host (.ci/test: go vet, go test ./...)
#   make vm-test   the suite in a pure cgroup v2 VM with a stock Debian 12
#                  kernel, as root and as an ordinary user (.ci/vm/README.md);
#                  needs root and qemu-system-x86, debootstrap, e2fsprogs,
#                  cpio, kmod, xz-utils from Debian
#   make vm-image  only (re)build the VM image (cached in .vm/)
#   make vagrant-test  the same in the Vagrantfile's debian machine under
#                  libvirt, with a Debian 12 box built here (.vagrant-box/);
#                  needs root and vagrant, vagrant-libvirt, libvirt from
#                  Debian (.ci/setup)
#   make vagrant-box   only (re)build the box
#   make soak      the reliability soak, outside the default CI time
#                  (.ci/soak): SOAK_DISPATCHES library dispatches with the
#                  warm pool, SOAK_RUNS `moat run`s, SOAK_KILLS kills of a
#                  ledger writer, SOAK_RUN_KILLS of `moat run`; as root and
#                  as nobody, each checked for leaks; needs root
#   make speed     issue 19's speed and memory targets as ratios measured in
#                  one run (.ci/speed): warm dispatch with and without the C
#                  tail, an idle pooled sandbox's Pss, two at a time, and
#                  cold `moat run` against bwrap (moatbench); SPEED_RUNS each
#   make cri-test  moat-runtime and runc side by side under containerd's CRI
#                  (.ci/cri/run): critest and a crictl scenario per handler,
#                  offline (a local registry, a private containerd), each
#                  compared with cmd/moat-runtime/testdata/cri-*.expected;
#                  needs root and what .ci/setup installs

GO ?= /usr/local/go/bin/go
export PATH := /usr/local/go/bin:$(PATH)

.PHONY: build install test vm-test vm-image vm-clean vagrant-test vagrant-box vagrant-clean soak speed cri-test cri-clean

SOAK_DISPATCHES ?= 10000
SOAK_RUNS ?= 2000
SOAK_KILLS ?= 1000
SOAK_RUN_KILLS ?= 200
SPEED_RUNS ?= 300

PREFIX ?= /usr/local

build:
	$(GO) build -o bin/moat ./cmd/moat

install:
	.ci/build-static bin
	install -d $(DESTDIR)$(PREFIX)/bin
	install -m 0755 bin/moat bin/moat-init bin/moat-runtime $(DESTDIR)$(PREFIX)/bin/

test:
	.ci/test

vm-image:
	bash .ci/vm/build-image.sh .vm

vm-test:
	bash .ci/vm/run.sh

vm-clean:
	rm -rf .vm

vagrant-box:
	bash .ci/vm/build-image.sh .vagrant-box --box

vagrant-test:
	bash .ci/vm/vagrant-run.sh

vagrant-clean:
	rm -rf .vagrant-box

soak:
	MOAT_SOAK_DISPATCHES=$(SOAK_DISPATCHES) MOAT_SOAK_RUNS=$(SOAK_RUNS) \
	MOAT_SOAK_KILLS=$(SOAK_KILLS) MOAT_SOAK_RUN_KILLS=$(SOAK_RUN_KILLS) .ci/soak

speed:
	.ci/speed $(SPEED_RUNS)

cri-test:
	.ci/cri/run

cri-clean:
	.ci/cri/stop
	rm -rf .cri
