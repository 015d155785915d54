package native

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/moat-sandbox/moat/executor"
	"github.com/moat-sandbox/moat/executor/egress"
	"github.com/moat-sandbox/moat/nsexec"
	"github.com/moat-sandbox/moat/policies"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Where a sandbox with an egress policy finds the proxy: the init's
// forwarder listens on EgressPort of the sandbox's loopback, and the
// host proxy's socket of this sandbox is bound at EgressSocket.
const (
	EgressPort   = 3128
	EgressSocket = "/tmp/.moat-egress.sock"
)

// WithEgressProxy has the provider's sandboxes reach the hosts of the
// policy's egress section through p, a proxy the process shares among its
// providers (each sandbox gets its own socket, allowlist and counters).
// Without it, a provider whose policy has an egress section starts a proxy
// of its own and Close stops it.
func WithEgressProxy(p *egress.Proxy) Option { return func(o *options) { o.egress = p } }

// WithEgressUsage calls f after every dispatch of a policy with an egress
// section, with what the sandbox did through the proxy: connections,
// denials and bytes each way.
func WithEgressUsage(f func(*executor.Request, egress.Usage)) Option {
	return func(o *options) { o.onEgress = f }
}

// egressRoute is a launcher's egress: the proxy and the policy's parsed
// allowlist.
type egressRoute struct {
	proxy *egress.Proxy
	own   bool // started by the provider, stopped by its Close
	allow *egress.Allowlist
	usage func(*executor.Request, egress.Usage)
	// loopback: the no-userns rung, which shares the host's network, so
	// each sandbox gets a port of the proxy's on 127.0.0.1
	// (egress.Proxy.OpenLoopback), the only TCP port its Landlock
	// domain lets it connect to (nsexec.Config.EgressTCP), instead of a
	// socket bound in and the init's forwarder.
	loopback bool
}

// lowerEgress sets up the template's egress: lo up, the forwarder's port
// and socket path (the per-sandbox socket is bound at each launch); in
// no-userns nothing, each launch has a port of its own.
func lowerEgress(o *options, pol *policies.Policy, tmpl *nsexec.Config) (*egressRoute, error) {
	if pol.Egress == nil {
		return nil, nil
	}
	allow, err := egress.NewAllowlist(pol.Egress)
	if err != nil {
		return nil, &executor.Error{Code: executor.CodeConfig, Err: err, Message: fmt.Sprintf("native: policy %q: %v", pol.Name, err)}
	}
	if !inetSockets(pol.Seccomp) {
		return nil, &executor.Error{Code: executor.CodeConfig, Message: fmt.Sprintf(
			"native: policy %q has an egress section, but its seccomp profile refuses socket(AF_INET), which the tool needs to reach the proxy at 127.0.0.1:%d; use a policy whose filter allows AF_INET sockets (default, python, node, shell)", pol.Name, EgressPort)}
	}
	r := &egressRoute{proxy: o.egress, allow: allow, usage: o.onEgress, loopback: tmpl.NoUserNS}
	if r.proxy == nil {
		if r.proxy, err = egress.New(egress.WithLogger(o.logger)); err != nil {
			return nil, fmt.Errorf("native: start the egress proxy: %w", err)
		}
		r.own = true
	}
	if r.loopback {
		return r, nil
	}
	tmpl.Network = nsexec.NetworkLoopback
	tmpl.Egress = &nsexec.Egress{Port: EgressPort, Socket: EgressSocket}
	return r, nil
}

// open gives one sandbox its socket, bound into cfg, and the proxy
// variables in its environment, replacing any the caller set: the
// forwarder is the only way out, and getenv(3) takes the first match.
// The returned option admits to the socket exactly the host id the
// sandbox runs as, once nsexec chose it: as root each sandbox has an id of
// its own from the range, and a process of another sandbox's id (or any
// other id of the range) must not use this sandbox's allowlist, nor be
// counted as it.
//
// In no-userns the sandbox's proxy is a port of its own on 127.0.0.1,
// the tool's one TCP port (cfg.EgressTCP), named in the variables; the
// tool runs as this process's uid, which the port admits.
func (r *egressRoute) open(cfg *nsexec.Config, tool string) (*egress.Sandbox, nsexec.Option, error) {
	open := r.proxy.Open
	if r.loopback {
		open = r.proxy.OpenLoopback
	}
	sb, err := open(r.allow, "tool", tool)
	if err != nil {
		return nil, nil, err
	}
	admit := nsexec.WithIdentityChosen(func(id nsexec.Identity) error {
		sb.Admit(id.UID, 1)
		return nil
	})
	addr := "127.0.0.1:" + strconv.Itoa(EgressPort)
	if r.loopback {
		cfg.EgressTCP, addr = sb.Port(), sb.Addr()
	} else {
		cfg.Mounts = append(slices.Clone(cfg.Mounts), specs.Mount{Source: sb.Socket(), Destination: EgressSocket, Type: "bind", Options: []string{"ro"}})
	}
	vars := egress.Env(addr)
	env := slices.DeleteFunc(slices.Clone(cfg.Env), func(kv string) bool {
		name, _, _ := strings.Cut(kv, "=")
		return slices.ContainsFunc(vars, func(v string) bool { return strings.HasPrefix(v, name+"=") })
	})
	cfg.Env = append(env, vars...)
	return sb, admit, nil
}

// attestEgress is the posture's account of the egress policy.
func attestEgress(r *egressRoute, pol *policies.Policy) *executor.EgressPolicy {
	if r == nil {
		return nil
	}
	proxy := fmt.Sprintf("127.0.0.1:%d (HTTP CONNECT, HTTP, SOCKS5) to the host's filtering proxy", EgressPort)
	if r.loopback {
		proxy = "127.0.0.1, a port of each sandbox's own (HTTP CONNECT, HTTP, SOCKS5), the host's filtering proxy itself; " +
			"Landlock allows a TCP connect to that port number only, on any address the tool can route to (a rule names a port, not an address)"
	}
	return &executor.EgressPolicy{Allow: slices.Clone(pol.Egress.Allow), CIDRs: slices.Clone(pol.Egress.CIDRs), Proxy: proxy}
}

func (l *launcher) egressUsage() func(*executor.Request, egress.Usage) {
	if l.egress == nil {
		return nil
	}
	return l.egress.usage
}

// inetSockets reports whether profile lets the tool call socket(AF_INET):
// no profile, an allowing default that no argument-free rule overrides,
// or an allowing rule for socket with no argument condition or with
// arg0 == AF_INET. It reads the profile as data, so a rule it cannot
// judge counts as a refusal: the run is refused with a reason, instead of
// a tool that cannot reach its proxy.
func inetSockets(profile *specs.LinuxSeccomp) bool {
	if profile == nil {
		return true
	}
	const afInet = 2
	allowing := func(a specs.LinuxSeccompAction) bool {
		return a == specs.ActAllow || a == specs.ActLog
	}
	denied := false
	for _, r := range profile.Syscalls {
		if !slices.Contains(r.Names, "socket") {
			continue
		}
		if !allowing(r.Action) {
			denied = denied || len(r.Args) == 0
			continue
		}
		if len(r.Args) == 0 || slices.ContainsFunc(r.Args, func(a specs.LinuxSeccompArg) bool {
			return a.Index == 0 && a.Op == specs.OpEqualTo && a.Value == afInet
		}) {
			return true
		}
	}
	return allowing(profile.DefaultAction) && !denied
}
