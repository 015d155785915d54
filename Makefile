# moat: build and test entry points.
#
#   make build     go build -o bin/moat ./cmd/moat
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

GO ?= /usr/local/go/bin/go
export PATH := /usr/local/go/bin:$(PATH)

.PHONY: build test vm-test vm-image vm-clean vagrant-test vagrant-box vagrant-clean

build:
	$(GO) build -o bin/moat ./cmd/moat

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
