package executor_test

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/conformance"
	"github.com/moat-sandbox/moat/executor"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

const pinned = "localhost/tools@sha256:73943dfd7b1fdd10ec7bf5dbfd086309ab70658323f0450d794a809dfcb8c8d5"

// The reference's example descriptor (contract 10.1).
func subprocessPosture() executor.Posture {
	return executor.Posture{RegulatedPosture: 1, Kind: "tool-executor", Name: "subprocess", Ledger: true, AllowEnv: []string{"PATH"},
		Bounds:    &executor.Bounds{TimeoutMs: 5000, MaxOutputBytes: 1048576},
		Isolation: &executor.Isolation{Flavor: executor.FlavorSubprocess, Sandboxed: true}}
}

func containerPosture() executor.Posture {
	return executor.Posture{RegulatedPosture: 1, Kind: "tool-executor", Name: "container", Ledger: true, AllowEnv: []string{},
		Bounds: &executor.Bounds{TimeoutMs: 30000, MaxOutputBytes: 1048576},
		Isolation: &executor.Isolation{Flavor: executor.FlavorContainer, Network: "none", ReadOnlyRoot: true,
			CapDrop: []string{"ALL"}, Image: pinned}}
}

func nativePosture() executor.Posture {
	return executor.Posture{RegulatedPosture: 1, Kind: "tool-executor", Name: "native", Ledger: true, AllowEnv: []string{},
		Bounds: &executor.Bounds{TimeoutMs: 30000, MaxOutputBytes: 1048576},
		Isolation: &executor.Isolation{Flavor: executor.FlavorNative, Network: "none", ReadOnlyRoot: true, CapDrop: []string{"ALL"},
			Native: &executor.NativeIsolation{
				Namespaces:  []string{"user", "mount", "pid", "network", "ipc", "uts"},
				Seccomp:     executor.Seccomp{Enabled: true, ProfileDigest: "sha256:" + strings.Repeat("ab", 32)},
				Cgroup:      "hybrid",
				Limits:      map[string]string{"memory": "enforced", "pids": "enforced"},
				UIDMappings: []specs.LinuxIDMapping{{ContainerID: 0, HostID: 65534, Size: 1}},
				GIDMappings: []specs.LinuxIDMapping{{ContainerID: 0, HostID: 65534, Size: 1}},
				Rootfs:      "tmpfs+ro-binds",
			}}}
}

func TestPostureJSON(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    executor.Posture
		want string
	}{
		{"reference example", subprocessPosture(),
			`{"regulatedPosture":1,"kind":"tool-executor","name":"subprocess","ledger":true,"allowEnv":["PATH"],"bounds":{"timeoutMs":5000,"maxOutputBytes":1048576},"isolation":{"flavor":"subprocess","sandboxed":true}}`},
		{"container", containerPosture(),
			`{"regulatedPosture":1,"kind":"tool-executor","name":"container","ledger":true,"allowEnv":[],"bounds":{"timeoutMs":30000,"maxOutputBytes":1048576},"isolation":{"flavor":"container","network":"none","readOnlyRoot":true}}`},
		{"native", nativePosture(),
			`{"regulatedPosture":1,"kind":"tool-executor","name":"native","ledger":true,"allowEnv":[],"bounds":{"timeoutMs":30000,"maxOutputBytes":1048576},"isolation":{"flavor":"native","network":"none","readOnlyRoot":true,"capDrop":["ALL"],"namespaces":["user","mount","pid","network","ipc","uts"],"seccomp":{"enabled":true,"profileDigest":"sha256:` + strings.Repeat("ab", 32) + `"},"cgroup":"hybrid","limits":{"memory":"enforced","pids":"enforced"},"uidMappings":[{"containerID":0,"hostID":65534,"size":1}],"gidMappings":[{"containerID":0,"hostID":65534,"size":1}],"rootfs":"tmpfs+ro-binds"}}`},
	} {
		got, err := json.Marshal(tc.p)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, got, tc.want)
		}
	}
}

// fields returns the Field of every *FloorError joined in err.
func fields(err error) []string {
	var out []string
	var walk func(error)
	walk = func(e error) {
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			for _, x := range j.Unwrap() {
				walk(x)
			}
			return
		}
		var fe *executor.FloorError
		if errors.As(e, &fe) {
			out = append(out, fe.Field)
		}
	}
	if err != nil {
		walk(err)
	}
	return out
}

func TestRegulatedFloor(t *testing.T) {
	for _, p := range []executor.Posture{subprocessPosture(), containerPosture(), nativePosture()} {
		if err := executor.RegulatedFloor(p); err != nil {
			t.Errorf("%s: %v", p.Name, err)
		}
	}
	// What the reference does not floor: attested, not refused.
	loose := subprocessPosture()
	loose.Isolation.Sandboxed, loose.AllowEnv, loose.Bounds.TimeoutMs = false, []string{"AWS_SECRET"}, 1<<40
	c := containerPosture()
	c.Isolation.Network, c.Isolation.ReadOnlyRoot = "host", false
	for _, p := range []executor.Posture{loose, c} {
		if err := executor.RegulatedFloor(p); err != nil {
			t.Errorf("the regulated floor refused a loosening the reference accepts: %v", err)
		}
	}
	for _, tc := range []struct {
		name  string
		edit  func(*executor.Posture)
		field string
	}{
		{"version", func(p *executor.Posture) { p.RegulatedPosture = 2 }, "construction"},
		{"name", func(p *executor.Posture) { p.Name = "" }, "construction"},
		{"kind", func(p *executor.Posture) { p.Kind = "model-adapter" }, "construction['subprocess']"},
		{"ledger", func(p *executor.Posture) { p.Ledger = false }, "construction['subprocess'].ledger"},
		{"bounds", func(p *executor.Posture) { p.Bounds = nil }, "construction['subprocess'].bounds"},
		{"isolation", func(p *executor.Posture) { p.Isolation = nil }, "construction['subprocess'].isolation"},
		{"flavor", func(p *executor.Posture) { p.Isolation.Flavor = "vm" }, "construction['subprocess'].isolation"},
	} {
		p := subprocessPosture()
		tc.edit(&p)
		err := executor.RegulatedFloor(p)
		var fe *executor.FloorError
		if !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("%s: err %v, want a FloorError on %s", tc.name, err, tc.field)
			continue
		}
		want := "compileRegulatedProfile: " + tc.field + " " + fe.Requirement + "; the regulated floor is non-loosenable, so drop the field to inherit the floor or meet it explicitly"
		if err.Error() != want {
			t.Errorf("%s: message %q, want %q", tc.name, err, want)
		}
	}
	p := subprocessPosture()
	p.Ledger = false
	if err := executor.RegulatedFloor(p); !strings.Contains(err.Error(), "must be armed (RV4204)") {
		t.Errorf("ledger message %q", err)
	}
}

func TestStrictFloor(t *testing.T) {
	for _, p := range []executor.Posture{containerPosture(), nativePosture()} {
		if err := executor.StrictFloor(p); err != nil {
			t.Errorf("%s: %v", p.Name, err)
		}
	}
	const iso = "construction['container'].isolation"
	const niso = "construction['native'].isolation"
	for _, tc := range []struct {
		name string
		p    func() executor.Posture
		edit func(*executor.Posture)
		want []string
	}{
		{"subprocess", subprocessPosture, func(*executor.Posture) {}, []string{"construction['subprocess'].isolation.flavor"}},
		{"network", containerPosture, func(p *executor.Posture) { p.Isolation.Network = "bridge" }, []string{iso + ".network"}},
		{"root", containerPosture, func(p *executor.Posture) { p.Isolation.ReadOnlyRoot = false }, []string{iso + ".readOnlyRoot"}},
		{"caps", containerPosture, func(p *executor.Posture) { p.Isolation.CapDrop = []string{"NET_RAW"} }, []string{iso + ".capDrop"}},
		{"image tag", containerPosture, func(p *executor.Posture) { p.Isolation.Image = "busybox:1.36" }, []string{iso + ".image"}},
		{"all of them and the ledger", containerPosture, func(p *executor.Posture) {
			p.Ledger, p.Isolation.Network, p.Isolation.ReadOnlyRoot, p.Isolation.CapDrop, p.Isolation.Image = false, "host", false, nil, "x"
		}, []string{"construction['container'].ledger", iso + ".network", iso + ".readOnlyRoot", iso + ".capDrop", iso + ".image"}},
		{"seccomp off", nativePosture, func(p *executor.Posture) { p.Isolation.Native.Seccomp.Enabled = false }, []string{niso + ".seccomp"}},
		{"limit degraded", nativePosture, func(p *executor.Posture) { p.Isolation.Native.Limits["pids"] = "degraded" }, []string{niso + ".limits.pids"}},
		{"no limits", nativePosture, func(p *executor.Posture) { p.Isolation.Native.Limits = nil }, []string{niso + ".limits"}},
		{"host root mapped", nativePosture, func(p *executor.Posture) { p.Isolation.Native.UIDMappings[0].HostID = 0 }, []string{niso + ".uidMappings"}},
		{"no native part", nativePosture, func(p *executor.Posture) { p.Isolation.Native = nil }, []string{niso + ".native"}},
		{"construction", containerPosture, func(p *executor.Posture) { p.Name = "" }, []string{"construction"}},
	} {
		p := tc.p()
		tc.edit(&p)
		got := fields(executor.StrictFloor(p))
		if strings.Join(got, ",") != strings.Join(tc.want, ",") {
			t.Errorf("%s: failing fields %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestFingerprint(t *testing.T) {
	base := executor.Fingerprint(containerPosture())
	if len(base) != 64 || base != executor.Fingerprint(containerPosture()) {
		t.Fatalf("fingerprint %q is not a stable sha256", base)
	}
	// The same posture built in another order fingerprints the same.
	n1, n2 := nativePosture(), nativePosture()
	n2.Isolation.Native.Limits = map[string]string{"pids": "enforced", "memory": "enforced"}
	if executor.Fingerprint(n1) != executor.Fingerprint(n2) {
		t.Fatalf("map order moved the fingerprint")
	}
	for _, tc := range []struct {
		name string
		p    func() executor.Posture
		edit func(*executor.Posture)
	}{
		{"ledger off", containerPosture, func(p *executor.Posture) { p.Ledger = false }},
		{"env forwarded", containerPosture, func(p *executor.Posture) { p.AllowEnv = []string{"AWS_SECRET"} }},
		{"longer timeout", containerPosture, func(p *executor.Posture) { p.Bounds.TimeoutMs++ }},
		{"bigger cap", containerPosture, func(p *executor.Posture) { p.Bounds.MaxOutputBytes *= 2 }},
		{"network", containerPosture, func(p *executor.Posture) { p.Isolation.Network = "bridge" }},
		{"writable root", containerPosture, func(p *executor.Posture) { p.Isolation.ReadOnlyRoot = false }},
		{"capabilities kept", nativePosture, func(p *executor.Posture) { p.Isolation.CapDrop = nil }},
		{"unsandboxed", subprocessPosture, func(p *executor.Posture) { p.Isolation.Sandboxed = false }},
		{"seccomp off", nativePosture, func(p *executor.Posture) { p.Isolation.Native.Seccomp.Enabled = false }},
		{"limit degraded", nativePosture, func(p *executor.Posture) { p.Isolation.Native.Limits["memory"] = "degraded" }},
		{"namespace dropped", nativePosture, func(p *executor.Posture) { p.Isolation.Native.Namespaces = p.Isolation.Native.Namespaces[1:] }},
	} {
		before := executor.Fingerprint(tc.p())
		p := tc.p()
		tc.edit(&p)
		if executor.Fingerprint(p) == before {
			t.Errorf("%s did not move the fingerprint", tc.name)
		}
	}
}

// A container's CapDrop and Image are moat's additions: outside the JSON,
// so its fingerprint stays the reference's, and judged by StrictFloor.
func TestContainerAdditionsStayOutOfTheDescriptor(t *testing.T) {
	base := executor.Fingerprint(containerPosture())
	p := containerPosture()
	p.Isolation.CapDrop, p.Isolation.Image = nil, "localhost/tools:latest"
	if executor.Fingerprint(p) != base {
		t.Fatal("capDrop or image moved a container fingerprint; the reference's descriptor has neither")
	}
	got := fields(executor.StrictFloor(p))
	want := []string{"construction['container'].isolation.capDrop", "construction['container'].isolation.image"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("StrictFloor failed %q, want %q", got, want)
	}
}

// TestFingerprintOfReferenceDescriptors: a reference descriptor read into a
// Posture marshals back to the same JSON and fingerprints to the hash the
// reference's own JCS gives it (a fractional timeoutMs included).
func TestFingerprintOfReferenceDescriptors(t *testing.T) {
	for _, r := range conformance.ReferencePostures() {
		var p executor.Posture
		if err := json.Unmarshal([]byte(r.Descriptor), &p); err != nil {
			t.Fatalf("%s: %v", r.Name, err)
		}
		got, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != r.Descriptor {
			t.Errorf("%s: posture JSON\n got %s\nwant %s", r.Name, got, r.Descriptor)
		}
		if fp := executor.Fingerprint(p); fp != r.Fingerprint {
			t.Errorf("%s: fingerprint %s, the reference's %s", r.Name, fp, r.Fingerprint)
		}
	}
}

// quoted lists the values a floor requirement quotes ('...').
func quoted(s string) []string {
	var out []string
	for {
		_, rest, ok := strings.Cut(s, "'")
		if !ok {
			return out
		}
		v, after, ok := strings.Cut(rest, "'")
		if !ok {
			return out
		}
		out, s = append(out, v), after
	}
}

// TestRegulatedFloorAgainstTheReference: for each descriptor the reference's
// compileRegulatedProfile judged, RegulatedFloor gives the same verdict, the
// same field and the same quoted values, except the two documented
// differences (the native flavour accepted; the reference's other kinds
// refused, since a Posture cannot carry their members).
func TestRegulatedFloorAgainstTheReference(t *testing.T) {
	for _, r := range conformance.ReferenceFloor() {
		var p executor.Posture
		if err := json.Unmarshal(r.Descriptor, &p); err != nil {
			t.Fatalf("%s: %v", r.Name, err)
		}
		err := executor.RegulatedFloor(p)
		var fe *executor.FloorError
		if err != nil && !errors.As(err, &fe) {
			t.Errorf("%s: %v is not a *FloorError", r.Name, err)
			continue
		}
		switch {
		case p.Isolation != nil && p.Isolation.Flavor == executor.FlavorNative:
			// Deliberate: moat's own flavour passes moat's floor.
			if r.Verdict != "refused" || err != nil {
				t.Errorf("%s: reference %s, moat %v; want refused and accepted", r.Name, r.Verdict, err)
			}
			continue
		case p.Kind == "mcp-source" || p.Kind == "model-adapter" || p.Kind == "ai-sdk-bridge":
			// Deliberate: not a tool executor's descriptor.
			if fe == nil || fe.Field != "construction['"+p.Name+"']" || !slices.Equal(quoted(fe.Requirement)[:1], []string{p.Kind}) {
				t.Errorf("%s: moat %v; want a refusal of construction['%s'] quoting its kind", r.Name, err, p.Name)
			}
			continue
		}
		verdict := "accepted"
		if err != nil {
			verdict = "refused"
		}
		if verdict != r.Verdict {
			t.Errorf("%s: moat %s (%v), the reference %s", r.Name, verdict, err, r.Verdict)
			continue
		}
		if err == nil {
			continue
		}
		if fe.Field != r.Field {
			t.Errorf("%s: field %s, the reference's %s", r.Name, fe.Field, r.Field)
		}
		if got, want := quoted(fe.Requirement), quoted(r.Requirement); !slices.Equal(got, want) {
			t.Errorf("%s: quoted values %q, the reference's %q\n moat: %s\n  ref: %s", r.Name, got, want, fe.Requirement, r.Requirement)
		}
	}
}

// TestPostureDecodesAsTheReferenceReads: a descriptor decoded into a
// Posture holds what the reference's judgeDescriptor normalized it to (its
// output, run on each of these): non-strings dropped from allowEnv,
// sandboxed and readOnlyRoot === true, network String(network), numbers
// kept with their fractions, regulatedPosture 1.0 as 1.
func TestPostureDecodesAsTheReferenceReads(t *testing.T) {
	for _, tc := range []struct{ in, reference string }{
		{`{"regulatedPosture":1.0,"kind":"tool-executor","name":"subprocess","ledger":true,"allowEnv":["PATH",7,null,"HOME"],"bounds":{"timeoutMs":1500.5,"maxOutputBytes":1048576.5},"isolation":{"flavor":"subprocess","sandboxed":"yes"}}`,
			`{"regulatedPosture":1,"kind":"tool-executor","name":"subprocess","ledger":true,"allowEnv":["PATH","HOME"],"bounds":{"timeoutMs":1500.5,"maxOutputBytes":1048576.5},"isolation":{"flavor":"subprocess","sandboxed":false}}`},
		{`{"regulatedPosture":1,"kind":"tool-executor","name":"container","ledger":true,"allowEnv":"PATH","bounds":{"timeoutMs":5000,"maxOutputBytes":1048576},"isolation":{"flavor":"container","network":5,"readOnlyRoot":1}}`,
			`{"regulatedPosture":1,"kind":"tool-executor","name":"container","ledger":true,"allowEnv":[],"bounds":{"timeoutMs":5000,"maxOutputBytes":1048576},"isolation":{"flavor":"container","network":"5","readOnlyRoot":false}}`},
	} {
		var p executor.Posture
		if err := json.Unmarshal([]byte(tc.in), &p); err != nil {
			t.Fatalf("%s: %v", tc.in, err)
		}
		if err := executor.RegulatedFloor(p); err != nil {
			t.Errorf("%s: %v; the reference accepts it", tc.in, err)
		}
		if got, _ := json.Marshal(p); string(got) != tc.reference {
			t.Errorf("decoded\n %s\nthe reference's normalized\n %s", got, tc.reference)
		}
	}
	// Not an object: the zero posture, refused as the reference refuses it.
	for _, doc := range []string{`null`, `5`, `"x"`, `[1]`} {
		var p executor.Posture
		if err := json.Unmarshal([]byte(doc), &p); err != nil {
			t.Fatalf("%s: %v", doc, err)
		}
		var fe *executor.FloorError
		if err := executor.RegulatedFloor(p); !errors.As(err, &fe) || fe.Field != "construction" {
			t.Errorf("%s: %v, want the construction refused", doc, err)
		}
	}
}

// TestFloorRefusesWhatTheReferenceCrashesOn: bounds or isolation of null
// make the reference's judgeDescriptor throw a TypeError ("Cannot read
// properties of null"); moat refuses them as missing, naming the field.
func TestFloorRefusesWhatTheReferenceCrashesOn(t *testing.T) {
	for field, doc := range map[string]string{
		"construction['subprocess'].bounds":    `{"regulatedPosture":1,"kind":"tool-executor","name":"subprocess","ledger":true,"allowEnv":[],"bounds":null,"isolation":{"flavor":"subprocess","sandboxed":true}}`,
		"construction['subprocess'].isolation": `{"regulatedPosture":1,"kind":"tool-executor","name":"subprocess","ledger":true,"allowEnv":[],"bounds":{"timeoutMs":1,"maxOutputBytes":1},"isolation":null}`,
	} {
		var p executor.Posture
		if err := json.Unmarshal([]byte(doc), &p); err != nil {
			t.Fatal(err)
		}
		var fe *executor.FloorError
		if err := executor.RegulatedFloor(p); !errors.As(err, &fe) || fe.Field != field {
			t.Errorf("%s: %v, want a FloorError on %s", doc, err, field)
		}
	}
}
