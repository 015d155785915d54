module example.com/embedder

go 1.26.0

require (
	github.com/moat-sandbox/moat v0.0.0-00010101000000-000000000000
	github.com/opencontainers/runtime-spec v1.3.0
)

require (
	github.com/containerd/cgroups/v3 v3.1.3 // indirect
	github.com/coreos/go-systemd/v22 v22.5.0 // indirect
	github.com/godbus/dbus/v5 v5.1.0 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/moby/sys/userns v0.1.0 // indirect
	github.com/seccomp/libseccomp-golang v0.11.1 // indirect
	golang.org/x/sys v0.50.0 // indirect
)

replace github.com/moat-sandbox/moat => ../../..
