package container

import (
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/moat-sandbox/moat/executor"
)

// The reference's container defaults (contract 6.1).
const (
	DefaultCLI       = "docker"
	DefaultNetwork   = "none"
	DefaultMemory    = "256m"
	DefaultCPUs      = "1.0"
	DefaultPidsLimit = 128
	DefaultWorkMount = "/work"
	DefaultKillGrace = 5 * time.Second
	// DefaultRemoveTimeout bounds the `<cli> rm -f` of a stopped container.
	DefaultRemoveTimeout = 30 * time.Second
)

// DefaultDaemonEnv names the host variables the CLI process itself gets.
var DefaultDaemonEnv = []string{"PATH", "HOME", "DOCKER_HOST", "DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH"}

// settings is the provider's whole configuration: the shared pipeline's
// plus the container's own.
type settings struct {
	cfg           executor.Config
	image, cli    string
	network       string
	memory, cpus  string
	pidsLimit     int
	readOnly      bool
	capDrop       []string
	workMount     string
	extraArgs     []string
	daemonEnv     []string
	runtime       string
	ulimits       []string
	noNewPrivs    bool
	userns        []string // --userns or --uidmap/--gidmap flags; empty: the CLI's default
	removeTimeout time.Duration
}

func defaults() settings {
	return settings{
		cfg: executor.Config{
			Name:          "container",
			KillGrace:     DefaultKillGrace,
			WorkdirPrefix: "rulvar-cexec-",
		},
		cli:           DefaultCLI,
		network:       DefaultNetwork,
		memory:        DefaultMemory,
		cpus:          DefaultCPUs,
		pidsLimit:     DefaultPidsLimit,
		readOnly:      true,
		capDrop:       []string{"ALL"},
		workMount:     DefaultWorkMount,
		daemonEnv:     DefaultDaemonEnv,
		removeTimeout: DefaultRemoveTimeout,
	}
}

// Option configures a Provider.
type Option func(*settings)

// WithImage sets the image every tool runs in (required). A reference
// pinned by digest ("name@sha256:<64 hex>") is what StrictFloor accepts.
func WithImage(ref string) Option { return func(s *settings) { s.image = ref } }

// WithCLI names the docker-compatible CLI, a path or a name searched in the
// daemon environment's PATH (default "docker"; "podman" works the same).
func WithCLI(cli string) Option { return func(s *settings) { s.cli = cli } }

// WithNetwork sets --network (default "none").
func WithNetwork(network string) Option { return func(s *settings) { s.network = network } }

// WithMemory sets --memory (default "256m").
func WithMemory(memory string) Option { return func(s *settings) { s.memory = memory } }

// WithCPUs sets --cpus (default "1.0").
func WithCPUs(cpus string) Option { return func(s *settings) { s.cpus = cpus } }

// WithPidsLimit sets --pids-limit (default 128).
func WithPidsLimit(n int) Option { return func(s *settings) { s.pidsLimit = n } }

// WithReadOnly sets whether --read-only is passed (default true).
func WithReadOnly(readOnly bool) Option { return func(s *settings) { s.readOnly = readOnly } }

// WithCapDrop replaces the dropped capabilities (default ALL), one
// --cap-drop each.
func WithCapDrop(caps ...string) Option {
	return func(s *settings) { s.capDrop = append([]string(nil), caps...) }
}

// WithWorkMount sets where the workdir is mounted and the container's cwd
// (default /work).
func WithWorkMount(dir string) Option { return func(s *settings) { s.workMount = dir } }

// WithExtraArgs appends raw CLI flags just before the image.
func WithExtraArgs(args ...string) Option {
	return func(s *settings) { s.extraArgs = append(s.extraArgs, args...) }
}

// WithRuntime passes --runtime (for example "runc": crun refuses hosts with
// hybrid cgroups).
func WithRuntime(runtime string) Option { return func(s *settings) { s.runtime = runtime } }

// WithUlimits passes one --ulimit per value ("nofile=1024:1024"): podman's
// defaults can exceed a host's hard limits, which the OCI runtime cannot
// raise.
func WithUlimits(limits ...string) Option {
	return func(s *settings) { s.ulimits = append(s.ulimits, limits...) }
}

// WithNoNewPrivileges passes --security-opt no-new-privileges: the tool
// and its children cannot gain privileges through execve (setuid and setgid
// bits, file capabilities), which --cap-drop alone does not prevent. Not in
// the reference's argv (contract 6.2), so it is opt-in.
func WithNoNewPrivileges() Option { return func(s *settings) { s.noNewPrivs = true } }

// WithUserNS passes --userns MODE (podman: "auto" draws a range of its own
// from the "containers" entries of /etc/subuid and /etc/subgid; "keep-id"
// maps a rootless caller to itself), so the container's root is not the
// host's. The workdir is then mounted with podman's U option, which chowns
// the fresh, still empty workdir to the container's root, or it could not
// write its 0700 /work. Docker has no per-container user namespace (use its
// daemon's userns-remap instead).
func WithUserNS(mode string) Option {
	return func(s *settings) { s.userns = []string{"--userns", mode} }
}

// WithIDMap maps the container's uids and gids 0 to size-1 onto the host's
// hostID to hostID+size-1 (--uidmap and --gidmap, podman and root only):
// the container's root is host uid hostID, never host root. It needs no
// /etc/subuid entry, which --userns auto does. The workdir is mounted with
// podman's U option, as for WithUserNS.
func WithIDMap(hostID, size uint32) Option {
	return func(s *settings) {
		m := fmt.Sprintf("0:%d:%d", hostID, size)
		s.userns = []string{"--uidmap", m, "--gidmap", m}
	}
}

// WithForwardEnv names host variables forwarded into the container (the
// reference's forwardEnv), when they are set in the host.
func WithForwardEnv(names ...string) Option {
	return func(s *settings) { s.cfg.AllowEnv = append(s.cfg.AllowEnv, names...) }
}

// WithDaemonEnv replaces the host variables the CLI process itself gets
// (default PATH, HOME, DOCKER_HOST, DOCKER_TLS_VERIFY, DOCKER_CERT_PATH).
// They are not forwarded into the container.
func WithDaemonEnv(names ...string) Option {
	return func(s *settings) { s.daemonEnv = append([]string(nil), names...) }
}

// WithLookupEnv replaces os.LookupEnv as the source of host values for
// forwardEnv and daemonEnv.
func WithLookupEnv(f func(string) (string, bool)) Option {
	return func(s *settings) { s.cfg.LookupEnv = f }
}

// WithCredentials mints per-call variables, forwarded into the container.
func WithCredentials(f executor.CredentialsFunc) Option {
	return func(s *settings) { s.cfg.Credentials = f }
}

// WithTimeout sets the wall-clock ceiling from spawn (default 30 s; zero is
// the default, as leaving it out). A fraction of a millisecond runs and is
// attested as it is (timeoutMs 1500.5).
func WithTimeout(d time.Duration) Option { return func(s *settings) { s.cfg.Timeout = d } }

// WithKillGrace sets the SIGTERM to SIGKILL grace (default 5 s, when the
// option is left out). Zero sends SIGKILL right after the SIGTERM, as the
// reference's killGraceMs 0.
func WithKillGrace(d time.Duration) Option {
	return func(s *settings) { s.cfg.KillGrace, s.cfg.KillGraceSet = d, true }
}

// WithMaxOutputBytes sets the per-stream output cap (default 1 MiB; zero is
// the default, as leaving it out).
func WithMaxOutputBytes(n int) Option { return func(s *settings) { s.cfg.MaxOutputBytes = n } }

// WithWorkdirBase sets the parent of the per-call workdirs (default the
// system temporary directory).
func WithWorkdirBase(dir string) Option { return func(s *settings) { s.cfg.WorkdirBase = dir } }

// WithLedger records every dispatch in l (two-phase when l has Intent).
func WithLedger(l executor.Ledger) Option { return func(s *settings) { s.cfg.Ledger = l } }

// WithCommand sets the fallback command (run inside the container) and the
// args prepended to the spec's args.
func WithCommand(command string, args ...string) Option {
	return func(s *settings) { s.cfg.Command, s.cfg.Args = command, args }
}

// WithClock replaces time.Now for startedAt and durationMs.
func WithClock(now func() time.Time) Option { return func(s *settings) { s.cfg.Now = now } }

// WithLogger sets the logger for warnings (default: discarded).
func WithLogger(l *slog.Logger) Option { return func(s *settings) { s.cfg.Logger = l } }

// WithRemoveTimeout bounds the removal of a stopped container (default
// 30 s).
func WithRemoveTimeout(d time.Duration) Option { return func(s *settings) { s.removeTimeout = d } }

// runArgs is the argv after the CLI's name, up to and including the image
// (contract 6.2, plus --name, --runtime and --ulimit).
func (s *settings) runArgs(workdir, name string, envNames []string) []string {
	a := []string{"run", "--rm", "-i", "--network", s.network,
		"--memory", s.memory, "--cpus", s.cpus, "--pids-limit", strconv.Itoa(s.pidsLimit)}
	if s.readOnly {
		a = append(a, "--read-only")
	}
	for _, c := range s.capDrop {
		a = append(a, "--cap-drop", c)
	}
	if s.noNewPrivs {
		a = append(a, "--security-opt", "no-new-privileges")
	}
	a = append(a, s.userns...)
	for _, n := range envNames {
		a = append(a, "-e", n)
	}
	work := workdir + ":" + s.workMount
	if len(s.userns) > 0 {
		work += ":U" // the container's root (a host uid of its own) must own /work
	}
	a = append(a, "-v", work, "-w", s.workMount, "--name", name)
	if s.runtime != "" {
		a = append(a, "--runtime", s.runtime)
	}
	for _, u := range s.ulimits {
		a = append(a, "--ulimit", u)
	}
	a = append(a, s.extraArgs...)
	return append(a, s.image)
}
