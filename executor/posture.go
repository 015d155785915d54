package executor

import (
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strings"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Posture is the reference's ToolExecutorRegulatedPosture (contract 10.1):
// what a provider attests about itself at construction, pure data with no
// I/O behind it. For the subprocess and container flavours its JSON is the
// reference descriptor member for member, so its Fingerprint is the hash a
// host computes of the reference's own descriptor; the container's
// additions (CapDrop, Image) are Go fields only, judged by StrictFloor and
// never in the JSON. The native flavour is moat's own (see Isolation).
type Posture struct {
	// RegulatedPosture is the shape version, 1.
	RegulatedPosture int `json:"regulatedPosture"`
	// Kind is "tool-executor".
	Kind string `json:"kind"`
	// Name is the provider's name: "subprocess", "container" or a host name.
	Name string `json:"name"`
	// Ledger reports whether a ledger records every dispatch.
	Ledger bool `json:"ledger"`
	// AllowEnv lists the host variables that reach the tool (subprocess:
	// allowEnv; container: forwardEnv). Never nil in a provider's posture.
	AllowEnv []string `json:"allowEnv"`
	// Bounds are the resolved timeout and output cap; nil means missing.
	Bounds *Bounds `json:"bounds"`
	// Isolation is what isolates the tool; nil means missing.
	Isolation *Isolation `json:"isolation"`

	// kindText is String(kind) of a decoded kind that was not a string,
	// for the floor's message; Kind is then "".
	kindText string
}

// The descriptor's fixed values.
const (
	PostureVersion = 1
	PostureKind    = "tool-executor"
)

// Bounds are the resolved limits of every dispatch, as they run: a
// timeout with a fraction of a millisecond is attested with it (1500.5), as
// the reference attests a fractional timeoutMs. Both are JavaScript numbers
// in the reference, so a descriptor from elsewhere may hold a fractional
// cap too.
type Bounds struct {
	TimeoutMs      float64 `json:"timeoutMs"`
	MaxOutputBytes float64 `json:"maxOutputBytes"`
}

// Flavor names an isolation shape. A reference host knows only subprocess
// and container; native is moat's own.
type Flavor string

// The isolation flavours.
const (
	FlavorSubprocess Flavor = "subprocess"
	FlavorContainer  Flavor = "container"
	FlavorNative     Flavor = "native"
)

// Isolation is the descriptor's isolation member. Which fields it carries in
// JSON depends on Flavor:
//
//	subprocess: flavor, sandboxed                            (the reference's)
//	container:  flavor, network, readOnlyRoot                (the reference's)
//	native:     flavor, network, readOnlyRoot, capDrop + the Native members
//
// A container's CapDrop and Image are not in its JSON: a reference host
// hashes its descriptor member for member, and moat's container descriptor
// must hash the same. StrictFloor still judges them.
type Isolation struct {
	Flavor Flavor
	// Sandboxed (subprocess) reports a launcher prefix around every tool.
	Sandboxed bool
	// Network is the network the tool sees ("none" is no network at all).
	Network string
	// ReadOnlyRoot reports a root filesystem the tool cannot write.
	ReadOnlyRoot bool
	// CapDrop lists the dropped capabilities ("ALL" drops every one); in
	// the JSON of the native flavour only.
	CapDrop []string
	// Image (container) is the image reference; pinned when it carries a
	// digest ("name@sha256:<64 hex>"). Never in the JSON.
	Image string
	// Native holds what only the native sandbox can attest.
	Native *NativeIsolation
}

// NativeIsolation is the native provider's part of the posture.
type NativeIsolation struct {
	// Namespaces are the namespaces every sandbox is created in, by their
	// OCI names ("user", "mount", "pid", "network", "ipc", "uts", "cgroup").
	Namespaces []string `json:"namespaces"`
	// Seccomp is the syscall filter.
	Seccomp Seccomp `json:"seccomp"`
	// Cgroup is the cgroup layout the limits use: "v2", "v1", "hybrid" or
	// "none" (rlimits and a wall-clock kill only).
	Cgroup string `json:"cgroup"`
	// CgroupSource says which path gave the cgroup: "systemd-scope" (a
	// delegated transient scope from the user's systemd manager),
	// "delegated" (moat's own cgroup was delegated already),
	// "cgroup-parent" (a group the caller named), "root", or "none".
	CgroupSource string `json:"cgroupSource,omitempty"`
	// Limits maps each limit ("memory", "pids", "cpu", "nofile", ...) to
	// LimitEnforced, LimitRlimit, LimitPerProcess or LimitDegraded.
	Limits map[string]string `json:"limits"`
	// UIDMappings and GIDMappings map sandbox ids to host ids.
	UIDMappings []specs.LinuxIDMapping `json:"uidMappings"`
	GIDMappings []specs.LinuxIDMapping `json:"gidMappings"`
	// Rootfs describes the sandbox's root ("tmpfs+ro-binds", a path).
	Rootfs string `json:"rootfs"`
	// HostIDs, when set, says each sandbox maps to a host uid and gid of its
	// own, drawn from this range and held for as long as it runs (root
	// without a fixed host identity); UIDMappings and GIDMappings then
	// name the range's first id.
	HostIDs *HostIDRange `json:"hostIds,omitempty"`
	// Egress, when set, is what the tool may reach through moat's filtering
	// proxy; the network namespace itself has no route out.
	Egress *EgressPolicy `json:"egress,omitempty"`
	// Landlock, when not 0, is the Landlock ABI of the domain every
	// sandbox's tool is in: every filesystem right beneath its own root,
	// none elsewhere (a second wall behind the mount namespace).
	Landlock int `json:"landlock,omitempty"`
	// Mode is the rung of the ladder the sandboxes run on (DESIGN.md
	// "Modes"): "full", or a degraded one ("no-proc": every namespace, no
	// procfs) where the host lacks a layer. ModeReason says why it is not
	// full and ModeDrops what full mode promises that it does not keep.
	Mode       string   `json:"mode,omitempty"`
	ModeReason string   `json:"modeReason,omitempty"`
	ModeDrops  []string `json:"modeDrops,omitempty"`
	// Reuse, when set, says each prepared sandbox serves up to
	// Dispatches dispatches, each after a proven reset (native.WithReuse).
	Reuse *Reuse `json:"reuse,omitempty"`
}

// EgressPolicy is a sandbox's egress allowlist as the policy states it.
type EgressPolicy struct {
	Allow []string `json:"allow"`
	CIDRs []string `json:"cidrs,omitempty"`
	// Proxy says where the tool finds the proxy.
	Proxy string `json:"proxy"`
}

// HostIDRange is a range of host ids, First to First+Count-1.
type HostIDRange struct {
	First uint32 `json:"first"`
	Count uint32 `json:"count"`
}

// Seccomp is the filter part of a native posture.
type Seccomp struct {
	Enabled bool `json:"enabled"`
	// ProfileDigest is the sha256 of the compiled profile.
	ProfileDigest string `json:"profileDigest"`
}

// The states of a native limit. Only LimitEnforced meets the strict floor
// or a policy's limits.required: an rlimit that stands in for a missing
// cgroup is better than nothing, not the same bound.
const (
	// LimitEnforced: the sandbox's cgroup holds the limit (or, for timeout
	// and outputCap, the pipeline does).
	LimitEnforced = "enforced"
	// LimitRlimit: no cgroup holds it; an rlimit bounds the sandbox as a
	// whole instead (pids: RLIMIT_NPROC, which counts the tasks of the
	// sandbox's uid in its own user namespace, its init included).
	LimitRlimit = "rlimit"
	// LimitPerProcess: no cgroup holds it; an rlimit bounds each process
	// of the sandbox, not their sum (memory: RLIMIT_DATA, the private
	// writable mappings of one process).
	LimitPerProcess = "per-process"
	// LimitDegraded: nothing holds it here.
	LimitDegraded = "degraded"
)

// MarshalJSON writes the members of i's flavour only, in the reference's
// order (for the reference's flavours, exactly the reference's members).
func (i Isolation) MarshalJSON() ([]byte, error) {
	capDrop := i.CapDrop
	if capDrop == nil {
		capDrop = []string{}
	}
	switch i.Flavor {
	case FlavorSubprocess:
		return json.Marshal(struct {
			Flavor    Flavor `json:"flavor"`
			Sandboxed bool   `json:"sandboxed"`
		}{i.Flavor, i.Sandboxed})
	case FlavorContainer:
		return json.Marshal(struct {
			Flavor       Flavor `json:"flavor"`
			Network      string `json:"network"`
			ReadOnlyRoot bool   `json:"readOnlyRoot"`
		}{i.Flavor, i.Network, i.ReadOnlyRoot})
	case FlavorNative:
		native := i.Native
		if native == nil {
			native = &NativeIsolation{}
		}
		return json.Marshal(struct {
			Flavor       Flavor   `json:"flavor"`
			Network      string   `json:"network"`
			ReadOnlyRoot bool     `json:"readOnlyRoot"`
			CapDrop      []string `json:"capDrop"`
			*NativeIsolation
		}{i.Flavor, i.Network, i.ReadOnlyRoot, capDrop, native})
	default:
		return json.Marshal(struct {
			Flavor Flavor `json:"flavor"`
		}{i.Flavor})
	}
}

// Fingerprint is the lowercase hex sha256 of the posture's canonical JSON
// (RFC 8785, as the reference's core serializes it), so any change of an
// attested setting, a loosening above all, moves it, and nothing else does.
// For a subprocess or container posture it equals the same hash of the
// reference executor's descriptor under the same settings.
func Fingerprint(p Posture) string {
	doc, err := json.Marshal(p)
	if err != nil {
		// Unreachable: the posture holds only strings, booleans and integers.
		return ""
	}
	canon, err := canonical(doc)
	if err != nil {
		return ""
	}
	return sha256Hex(canon)
}

// FloorError is one requirement of a regulated floor that a posture does not
// meet. Field names the descriptor member as the reference does
// ("construction['<name>'].ledger").
type FloorError struct {
	Field       string
	Requirement string
}

// Error follows the reference's template (contract 10.2):
// "compileRegulatedProfile: <field> <requirement>; the regulated floor is
// non-loosenable, ...". The field and every value quoted in the
// requirement are the reference's; the rest of the requirement's wording is
// moat's own.
func (e *FloorError) Error() string {
	return "compileRegulatedProfile: " + e.Field + " " + e.Requirement +
		"; the regulated floor is non-loosenable, so drop the field to inherit the floor or meet it explicitly"
}

// The descriptor kinds the reference's floor knows besides PostureKind. No
// provider attests them; RegulatedFloor leaves them to the host's own floor.
var otherKinds = []string{"mcp-source", "ai-sdk-bridge", "model-adapter"}

// RegulatedFloor judges a posture as the reference's compileRegulatedProfile
// judges a tool executor's (contract 10.2) and returns the first failure, a
// *FloorError, in the reference's order: the shape (version and name, field
// "construction"), the kind, an armed ledger, the bounds, a known isolation
// flavour. Like the reference it accepts any network, a writable root, an
// unsandboxed subprocess, any allowEnv and any bound value: those are
// attested and fingerprinted, not floored. StrictFloor floors them.
//
// Two verdicts differ from the reference's, deliberately: the native
// flavour, which a reference host refuses, is accepted; and the reference's
// other kinds ("mcp-source", "ai-sdk-bridge", "model-adapter"), which it
// judges by their own rules, are refused, because a Posture describes a tool
// executor and cannot carry their members. A Kind of "" is reported as the
// reference reports a missing kind, 'undefined'.
func RegulatedFloor(p Posture) error {
	if p.RegulatedPosture != PostureVersion || p.Name == "" {
		return &FloorError{"construction", "is not a regulated posture descriptor (need regulatedPosture: 1, a non-empty string name, and a known kind)"}
	}
	field := "construction['" + p.Name + "']"
	if p.Kind != PostureKind {
		kind := p.Kind
		switch {
		case p.kindText != "":
			kind = p.kindText // a decoded kind that was not a string
		case kind == "":
			kind = "undefined" // String(undefined): the Go zero value is the absent member
		}
		if slices.Contains(otherKinds, kind) {
			return &FloorError{field, "attests kind '" + kind + "', which is not a tool executor's; moat's floor judges 'tool-executor' descriptors only, so judge this construction with the host's compileRegulatedProfile"}
		}
		return &FloorError{field, "attests an unrecognized kind '" + kind + "'; of the kinds 'mcp-source', 'ai-sdk-bridge', 'model-adapter' and 'tool-executor', a tool executor attests the last"}
	}
	if !p.Ledger {
		return &FloorError{field + ".ledger", "must be armed (RV4204): configure an effect ledger on the executor so every dispatch is recorded and can be reconciled"}
	}
	if p.Bounds == nil {
		// A decoded descriptor whose bounds lack a member, or hold one that
		// is not a number, has none (UnmarshalJSON), as the reference sees it.
		return &FloorError{field + ".bounds", "must state the resolved timeoutMs and maxOutputBytes ceilings (RV4204)"}
	}
	switch {
	case p.Isolation == nil:
	case p.Isolation.Flavor == FlavorSubprocess, p.Isolation.Flavor == FlavorContainer, p.Isolation.Flavor == FlavorNative:
		return nil
	}
	return &FloorError{field + ".isolation", "must name its flavor, 'subprocess' or 'container' (RV4204), or moat's native flavour"}
}

// StrictFloor is the floor for regulated hosts that want the isolation
// itself floored: on top of RegulatedFloor it requires no network, a
// read-only root and every capability dropped; for a container an image
// pinned by digest; for a native sandbox seccomp on with a profile digest,
// every limit enforced and no mapping onto host root. A subprocess, which
// attests none of that, always fails. It returns every failure, joined,
// each a *FloorError naming its field.
func StrictFloor(p Posture) error {
	err := RegulatedFloor(p)
	var fe *FloorError
	if errors.As(err, &fe) && !strings.HasPrefix(fe.Field, "construction['"+p.Name+"'].") {
		return err // the shape or the kind is wrong: nothing further can be judged
	}
	return errors.Join(append([]error{err}, strictIsolation(p)...)...)
}

func strictIsolation(p Posture) []error {
	iso := p.Isolation
	if iso == nil {
		return nil
	}
	field := "construction['" + p.Name + "'].isolation"
	var errs []error
	fail := func(member, requirement string) {
		errs = append(errs, &FloorError{field + member, requirement})
	}
	switch iso.Flavor {
	case FlavorContainer, FlavorNative:
	case FlavorSubprocess:
		fail(".flavor", "must be 'container' or 'native' under the strict floor; a subprocess attests no network, filesystem or privilege isolation")
		return errs
	default:
		return nil // RegulatedFloor already named the unknown flavour
	}
	if iso.Network != "none" {
		fail(".network", "must be 'none' under the strict floor, not '"+iso.Network+"'")
	}
	if !iso.ReadOnlyRoot {
		fail(".readOnlyRoot", "must be true under the strict floor")
	}
	if !slices.Contains(iso.CapDrop, "ALL") {
		fail(".capDrop", "must drop ALL capabilities under the strict floor")
	}
	if iso.Flavor == FlavorContainer && !isPinnedImage(iso.Image) {
		fail(".image", "must be pinned by digest (name@sha256:<64 hex digits>) under the strict floor, not '"+iso.Image+"'")
	}
	if iso.Flavor == FlavorNative {
		errs = append(errs, strictNative(field, iso.Native)...)
	}
	return errs
}

func strictNative(field string, n *NativeIsolation) []error {
	if n == nil {
		return []error{&FloorError{field + ".native", "must be attested by a native sandbox"}}
	}
	var errs []error
	if !n.Seccomp.Enabled || !isSHA256Digest(n.Seccomp.ProfileDigest) {
		errs = append(errs, &FloorError{field + ".seccomp", "must be enabled with a sha256 profile digest under the strict floor"})
	}
	if len(n.Limits) == 0 {
		errs = append(errs, &FloorError{field + ".limits", "must list the enforced limits under the strict floor"})
	}
	for _, name := range slices.Sorted(maps.Keys(n.Limits)) {
		if n.Limits[name] != LimitEnforced {
			errs = append(errs, &FloorError{field + ".limits." + name, "must be enforced under the strict floor, not '" + n.Limits[name] + "'"})
		}
	}
	for _, ids := range []struct {
		member   string
		mappings []specs.LinuxIDMapping
	}{{".uidMappings", n.UIDMappings}, {".gidMappings", n.GIDMappings}} {
		for _, m := range ids.mappings {
			if m.HostID == 0 {
				errs = append(errs, &FloorError{field + ids.member, "must never map host id 0 into the sandbox"})
				break
			}
		}
	}
	return errs
}

// isSHA256Digest: ^sha256:[0-9a-f]{64}$ (checked by hand, like
// isToolName).
func isSHA256Digest(s string) bool {
	hex, ok := strings.CutPrefix(s, "sha256:")
	if !ok || len(hex) != 64 {
		return false
	}
	for i := 0; i < len(hex); i++ {
		if c := hex[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// isPinnedImage: ^[^@\s]+@sha256:[0-9a-f]{64}$, where \s is RE2's
// [\t\n\f\r ].
func isPinnedImage(s string) bool {
	ref, digest, ok := strings.Cut(s, "@")
	return ok && ref != "" && !strings.ContainsAny(ref, "\t\n\f\r ") && isSHA256Digest(digest)
}

// Posture is the descriptor of a provider named name running under this
// (resolved) configuration with the given isolation: the reference's ledger,
// allowEnv and bounds members come from the configuration itself.
func (c Config) Posture(name string, isolation *Isolation) Posture {
	return Posture{
		RegulatedPosture: PostureVersion,
		Kind:             PostureKind,
		Name:             name,
		Ledger:           c.Ledger != nil,
		AllowEnv:         append([]string{}, c.AllowEnv...),
		Bounds:           &Bounds{TimeoutMs: millis(c.Timeout), MaxOutputBytes: float64(c.MaxOutputBytes)},
		Isolation:        isolation,
	}
}

// millis is d in milliseconds, fraction included (the nearest double).
func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Reuse is the posture's reuse: how many dispatches one sandbox serves.
type Reuse struct {
	Dispatches int `json:"dispatches"`
}
