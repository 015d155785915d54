package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/moat-sandbox/moat/conformance/testenv"
)

// exposeFixture is a host layout: a tool dir outside the system
// directories holding an interpreter, a script using it through env, a
// sibling, and a data file.
func exposeFixture(t *testing.T) (dir string, x *exposer) {
	t.Helper()
	dir = t.TempDir()
	bin := filepath.Join(dir, "prefix", "bin")
	os.MkdirAll(bin, 0o755)
	write := func(p, s string, mode os.FileMode) {
		if err := os.WriteFile(p, []byte(s), mode); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(bin, "node"), "\x7fELF", 0o755)
	write(filepath.Join(dir, "tool.js"), "#!/usr/bin/env -S node --no-warnings\nconsole.log(1)\n", 0o755)
	write(filepath.Join(dir, "direct.sh"), "#!"+filepath.Join(bin, "node")+" --flag\n", 0o755)
	write(filepath.Join(dir, "sibling"), "secret", 0o644)
	write(filepath.Join(dir, "data.csv"), "a,b", 0o644)
	return dir, &exposer{callerPath: bin + ":/usr/bin:/bin", sandboxPath: bin + ":/usr/bin:/bin",
		protected: append(append([]string(nil), neverExposed...), "/var/lib/moat-store"), hostRoot: true,
		scratch: "/nonexistent-scratch", uid: os.Geteuid()} // dir is not below it: files are bound alone
}

func dests(t *testing.T, x *exposer, argv ...string) ([]string, []string) {
	t.Helper()
	out, mounts, err := x.exposeArgv(argv)
	if err != nil {
		t.Fatalf("expose %q: %v", argv, err)
	}
	var ds []string
	for _, m := range mounts {
		if len(m.Options) != 1 || m.Options[0] != "ro" || m.Type != "bind" {
			t.Errorf("mount %+v is not a read-only bind", m)
		}
		ds = append(ds, m.Destination)
	}
	return out, ds
}

// What the command line names is bound, file by file, and nothing else:
// never the script's directory or sibling, never a path the system
// directories already show, never an argument that does not exist.
func TestExposeArgvNamesExactly(t *testing.T) {
	dir, x := exposeFixture(t)
	node := filepath.Join(dir, "prefix", "bin", "node")
	for _, tc := range []struct {
		name string
		argv []string
		cmd  string
		want []string
	}{
		{"bare name from PATH", []string{"node", filepath.Join(dir, "tool.js")}, node, []string{node, filepath.Join(dir, "tool.js")}},
		{"env -S node through the sandbox's PATH", []string{filepath.Join(dir, "tool.js")}, filepath.Join(dir, "tool.js"), []string{filepath.Join(dir, "tool.js"), node}},
		{"absolute #! interpreter", []string{filepath.Join(dir, "direct.sh")}, filepath.Join(dir, "direct.sh"), []string{filepath.Join(dir, "direct.sh"), node}},
		{"system binary and a data file", []string{"sh", "-c", "cat $0", filepath.Join(dir, "data.csv"), "/work/out", "relative.txt"}, "/usr/bin/sh", []string{filepath.Join(dir, "data.csv")}},
		{"a directory covers what is inside", []string{"/bin/ls", filepath.Join(dir, "data.csv"), dir}, "/bin/ls", []string{dir}},
		{"the sandbox's own device nodes", []string{"/bin/cat", "/dev/null"}, "/bin/cat", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x.mounts = nil
			out, got := dests(t, x, tc.argv...)
			if out[0] != tc.cmd {
				t.Errorf("command %q, want %q", out[0], tc.cmd)
			}
			if strings.Join(got, " ") != strings.Join(tc.want, " ") {
				t.Errorf("exposed %q, want %q", got, tc.want)
			}
		})
	}
}

// A file below the sandbox's /tmp comes with its directory when only its
// owner may write that directory (the directory of a runner made for the
// tool), never with a shared one, and never /tmp itself.
func TestExposeArgvTempDirectory(t *testing.T) {
	dir, x := exposeFixture(t)
	x.scratch = filepath.Dir(dir)
	script := filepath.Join(dir, "direct.sh")
	node := filepath.Join(dir, "prefix", "bin", "node")
	if _, got := dests(t, x, script); strings.Join(got, " ") != dir {
		t.Errorf("private directory: exposed %q, want %q", got, dir)
	}
	os.Chmod(dir, 0o1777)
	x.mounts = nil
	if _, got := dests(t, x, script); strings.Join(got, " ") != script+" "+node {
		t.Errorf("shared directory: exposed %q, want the script alone and its interpreter alone (the #! line names no directory)", got)
	}
	x.scratch = dir
	x.mounts = nil
	if _, got := dests(t, x, script); strings.Join(got, " ") != script+" "+node {
		t.Errorf("directly in the scratch directory: exposed %q, want %q", got, []string{script, node})
	}
}

// The host's kernel interfaces, moat's state and the host root are refused
// whoever names them, through a symlink too, and a path above them is as
// bad as one inside.
func TestExposeArgvRefuses(t *testing.T) {
	dir, x := exposeFixture(t)
	link := filepath.Join(dir, "innocent")
	os.Symlink("/proc/1", link)
	rootLink := filepath.Join(dir, "up")
	os.Symlink("/", rootLink)
	for _, p := range []string{"/", "/proc", "/proc/self/root", "/sys/kernel", "/dev/shm", "/dev", "/run/moat", "/run", "/var/lib/moat-store", "/var", link, rootLink} {
		if _, err := os.Lstat(p); err != nil {
			continue // absent here (/run/moat as nobody)
		}
		x.mounts = nil
		_, _, err := x.exposeArgv([]string{"/bin/ls", p})
		var e *ExposeError
		if !errors.As(err, &e) || e.NotFound || !strings.Contains(err.Error(), "never exposes") {
			t.Errorf("expose %s: %v, want a refusal", p, err)
		}
	}
	// An executable or an argument over the sandbox's own /work, and a
	// missing command or interpreter.
	x.mounts = nil
	if _, _, err := x.exposeArgv([]string{"nosuch-command-anywhere"}); !isNotFound(err) {
		t.Errorf("missing command: %v", err)
	}
	os.WriteFile(filepath.Join(dir, "broken.js"), []byte("#!/usr/bin/env no-such-interpreter\n"), 0o755)
	if _, _, err := x.exposeArgv([]string{filepath.Join(dir, "broken.js")}); !isNotFound(err) || !strings.Contains(err.Error(), "sandbox's PATH") {
		t.Errorf("missing interpreter: %v", err)
	}
}

func isNotFound(err error) bool {
	var e *ExposeError
	return errors.As(err, &e) && e.NotFound
}

// End to end, as root and as nobody: a script in a shared directory is
// bound alone with its argument (its sibling stays hidden), one in a
// private temporary directory with its directory, read-only; a refused
// path stops the run before anything starts.
func TestRunExposeArgv(t *testing.T) {
	bothIdentities(t)
	for _, tc := range []struct {
		mode os.FileMode
		want []string
	}{
		// The directory around a lone file is the sandbox's own /tmp:
		// writable, and gone with the sandbox (never the host's).
		{0o1777, []string{"data-visible", "sibling-hidden", "write-in-scratch"}},
		{0o755, []string{"data-visible", "sibling-visible", "write-refused"}},
	} {
		dir := t.TempDir()
		script := filepath.Join(dir, "show")
		os.WriteFile(script, []byte("#!/bin/sh\ncat \"$1\"\ncat "+filepath.Join(dir, "sibling")+" 2>/dev/null || echo sibling-hidden\n"+
			"touch "+filepath.Join(dir, "new")+" 2>/dev/null && echo write-in-scratch || echo write-refused\n"), 0o755)
		os.WriteFile(filepath.Join(dir, "data"), []byte("data-visible\n"), 0o644)
		os.WriteFile(filepath.Join(dir, "sibling"), []byte("sibling-visible\n"), 0o644)
		os.Chmod(dir, tc.mode)
		r := moat(t, "", "run", "--expose-argv", "--", script, filepath.Join(dir, "data"))
		got := strings.Fields(r.stdout)
		if r.code != 0 || strings.Join(got, " ") != strings.Join(tc.want, " ") {
			t.Errorf("directory %#o: exit %d, saw %q, want %q\nstderr %s", tc.mode, r.code, got, tc.want, r.stderr)
		}
		if _, err := os.Stat(filepath.Join(dir, "new")); err == nil {
			t.Errorf("directory %#o: the tool wrote into the host directory", tc.mode)
		}
		if r := moat(t, "", "run", "--", script, filepath.Join(dir, "data")); r.code != exitNotFound {
			t.Errorf("without --expose-argv: exit %d, want 127 (the script is not there)\n%s", r.code, r.stderr)
		}
	}
	if r := moat(t, "", "run", "--expose-argv", "--", "/bin/ls", "/proc/self/root"); r.code != exitUsage || !strings.Contains(r.stderr, "never exposes") {
		t.Errorf("refused path: exit %d, stderr %s", r.code, r.stderr)
	}
}

// Issue 28 item 3: only what the caller typed brings its private directory.
// A script's #! line (its contents, perhaps another user's) names an
// interpreter in someone's private directory below /tmp, directly or
// through env: the interpreter is bound alone, never the directory with
// its secret. Nor does a typed symlink bring the directory of its target,
// nor (as root) a private directory another user owns.
func TestExposeArgvOnlyTypedPathsBringTheirDirectory(t *testing.T) {
	dir, x := exposeFixture(t)
	x.scratch = dir
	caller, victim := filepath.Join(dir, "caller"), filepath.Join(dir, "victim")
	for _, d := range []string{caller, victim} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	interp := filepath.Join(victim, "interp")
	secret := filepath.Join(victim, "secret")
	os.WriteFile(interp, []byte("#!/bin/sh\n"), 0o755)
	os.WriteFile(secret, []byte("secret"), 0o644)
	direct := filepath.Join(caller, "direct")
	os.WriteFile(direct, []byte("#!"+interp+"\n"), 0o755)
	viaEnv := filepath.Join(caller, "via-env")
	os.WriteFile(viaEnv, []byte("#!/usr/bin/env interp\n"), 0o755)
	x.sandboxPath = victim + ":/usr/bin:/bin"
	link := filepath.Join(caller, "link")
	os.Symlink(secret, link)

	for _, tc := range []struct {
		name string
		argv []string
		want []string // destination<-source
	}{
		{"#! names it", []string{direct}, []string{caller + "<-" + caller, interp + "<-" + interp}},
		{"#!/usr/bin/env finds it", []string{viaEnv}, []string{caller + "<-" + caller, interp + "<-" + interp}},
		{"a typed symlink into it", []string{"/bin/cat", link}, []string{link + "<-" + secret}},
		{"typed, it comes whole", []string{"/bin/cat", secret}, []string{victim + "<-" + victim}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x.mounts = nil
			if _, _, err := x.exposeArgv(tc.argv); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, m := range x.mounts {
				got = append(got, m.Destination+"<-"+m.Source)
			}
			if strings.Join(got, " ") != strings.Join(tc.want, " ") {
				t.Errorf("exposed %q, want %q", got, tc.want)
			}
		})
	}
	t.Run("another user's private directory", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("needs root to give the directory to another user")
		}
		if err := os.Chown(victim, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		defer os.Chown(victim, 0, 0)
		x.mounts = nil
		if _, _, err := x.exposeArgv([]string{"/bin/cat", secret}); err != nil {
			t.Fatal(err)
		}
		if len(x.mounts) != 1 || x.mounts[0].Destination != secret {
			t.Errorf("exposed %+v, want %s alone", x.mounts, secret)
		}
	})
}

// End to end, as root and as nobody: a script whose #! interpreter lies in
// a private directory below /tmp beside a secret runs, and cannot read the
// secret.
func TestRunExposeArgvInterpreterKeepsItsDirectory(t *testing.T) {
	bothIdentities(t)
	dir := t.TempDir()
	caller, victim := filepath.Join(dir, "caller"), filepath.Join(dir, "victim")
	for _, d := range []string{dir, caller, victim} {
		os.MkdirAll(d, 0o755)
		os.Chmod(d, 0o755)
	}
	interp := filepath.Join(victim, "interp")
	os.WriteFile(interp, []byte("#!/bin/sh\nexec /bin/sh \"$@\"\n"), 0o755)
	os.WriteFile(filepath.Join(victim, "secret"), []byte("victim-secret\n"), 0o644)
	script := filepath.Join(caller, "tool")
	os.WriteFile(script, []byte("#!"+interp+"\necho ran\ncat "+filepath.Join(victim, "secret")+" 2>/dev/null || echo secret-hidden\n"), 0o755)
	r := moat(t, "", "run", "--expose-argv", "--", script)
	if r.code != 0 || r.stdout != "ran\nsecret-hidden\n" {
		t.Errorf("exit %d, stdout %q, want the script to run and the secret hidden\nstderr %s", r.code, r.stdout, r.stderr)
	}
}

// Issue 32: the reference kit's own layout. Its executor writes the runner
// into a 0700 directory it makes with mkdtemp, as the user it runs as, and
// runs `node <dir>/runner.cjs`; the runner loads a module beside it. As
// root the tool is a host id of its own, so --expose-argv's read-only bind
// of that directory is an id-mapped mount of its owner (nsexec
// WithOwnerMappedBinds); rootless the tool is the caller already. Either
// way the tool reads and runs the caller's files there, cannot write or
// append to them, and cannot see a sibling 0700 directory that was not
// exposed; as root a 0600 file of another host user in the exposed
// directory stays closed, and a setuid file grants nothing (nosuid). On the
// host the directory keeps its mode and owner.
func TestRunExposeArgvPrivateDirectory(t *testing.T) {
	bothIdentities(t)
	root := os.Geteuid() == 0
	dir, err := os.MkdirTemp("", "rulvar-exec-tool-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sibling, err := os.MkdirTemp("", "rulvar-exec-other-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sibling) })
	os.WriteFile(filepath.Join(sibling, "secret"), []byte("sibling-visible\n"), 0o600)
	if root {
		testenv.RequireIDMappedMounts(t, dir)
	}
	f := func(name string) string { return filepath.Join(dir, name) }
	os.WriteFile(f("lib.sh"), []byte("echo module-loaded\n"), 0o600)
	os.WriteFile(f("runner.sh"), []byte(". "+f("lib.sh")+"\n"+
		"cat "+filepath.Join(sibling, "secret")+" 2>/dev/null || echo sibling-hidden\n"+
		"touch "+f("new")+" 2>/dev/null && echo wrote || echo write-refused\n"+
		"echo x >> "+f("runner.sh")+" 2>/dev/null && echo appended || echo append-refused\n"+
		"if [ -e "+f("theirs")+" ]; then cat "+f("theirs")+" 2>/dev/null || echo theirs-refused; fi\n"+
		"if [ -e "+f("suid-id")+" ]; then [ \"$("+f("suid-id")+" -u)\" = \"$(id -u)\" ] && echo suid-inert || echo suid-GRANTED; "+
		"awk '$5 == \""+dir+"\" {print $6}' /proc/self/mountinfo | grep -q nosuid && echo nosuid || echo suid-allowed; fi\n"), 0o600)
	os.WriteFile(f("run"), []byte("#!/bin/sh\necho script-ran\n"), 0o700)
	want := []string{"module-loaded", "sibling-hidden", "write-refused", "append-refused"}
	if root {
		os.WriteFile(f("theirs"), []byte("theirs-visible\n"), 0o600)
		os.Chown(f("theirs"), 1234, 1234)
		id, err := os.ReadFile("/usr/bin/id")
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(f("suid-id"), id, 0o755)
		os.Chmod(f("suid-id"), 0o755|os.ModeSetuid)
		want = append(want, "theirs-refused", "suid-inert", "nosuid")
	}
	var before syscall.Stat_t
	syscall.Stat(dir, &before)

	// As the reference runs it: a system interpreter, the runner an argument.
	r := moat(t, "", "run", "--expose-argv", "--", "/bin/sh", f("runner.sh"))
	if got := strings.Fields(r.stdout); r.code != 0 || strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("runner in a 0700 mkdtemp directory: exit %d, saw %q, want %q\nstderr %s", r.code, got, want, r.stderr)
	}
	// And a 0700 script in it as the command itself.
	if r := moat(t, "", "run", "--expose-argv", "--", f("run")); r.code != 0 || r.stdout != "script-ran\n" {
		t.Errorf("0700 script in a 0700 mkdtemp directory: exit %d, stdout %q\nstderr %s", r.code, r.stdout, r.stderr)
	}
	var after syscall.Stat_t
	syscall.Stat(dir, &after)
	if after.Mode != before.Mode || after.Uid != before.Uid || after.Mode&0o777 != 0o700 {
		t.Errorf("on the host the directory is now mode %#o uid %d, was %#o uid %d", after.Mode, after.Uid, before.Mode, before.Uid)
	}
	if _, err := os.Stat(f("new")); err == nil {
		t.Error("the tool wrote into the host directory")
	}
	if b, _ := os.ReadFile(f("runner.sh")); strings.HasSuffix(string(b), "x\n") {
		t.Error("the tool appended to the runner on the host")
	}
}

// TestDispatchExposeArgv: moat dispatch --expose-argv runs a tool program
// whose script sits in a 0700 mkdtemp directory of the caller (the
// newcomer's first dispatch, README's tour), as root and as nobody: the
// result comes back and the ledger has its two rows; without the flag the
// script is not in the sandbox, and moat warns that the argument names a
// file the sandbox does not have.
func TestDispatchExposeArgv(t *testing.T) {
	bothIdentities(t)
	dir, err := os.MkdirTemp("", "rulvar-exec-tool-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if os.Geteuid() == 0 {
		testenv.RequireIDMappedMounts(t, dir)
	}
	tool := filepath.Join(dir, "tool.sh")
	os.WriteFile(tool, []byte("read -r call\necho '{\"seen\":'\"$call\"'}'\n"), 0o600)
	led := filepath.Join(dir, "effects.jsonl")
	r := moat(t, "", "dispatch", "--tool", "github.create_issue", "--args", `{"a":6}`, "--ledger", led, "--expose-argv", "--", "/bin/sh", tool)
	if r.code != 0 || !strings.Contains(r.stdout, `"tool":"github.create_issue"`) || !strings.Contains(r.stdout, `"a":6`) {
		t.Fatalf("dispatch --expose-argv of a script in a 0700 directory: exit %d, stdout %q\nstderr %s", r.code, r.stdout, r.stderr)
	}
	rows, _ := os.ReadFile(led)
	if n := strings.Count(string(rows), "\n"); n != 2 || !strings.Contains(string(rows), `"outcome":"ok"`) {
		t.Errorf("the ledger has %d rows, want an intent and an ok outcome:\n%s", n, rows)
	}
	// Without --expose-argv, named relative to the caller's directory.
	rel := moatIn(t, dir, "", "dispatch", "--tool", "t", "--", "/bin/sh", "tool.sh")
	if rel.code == 0 || !strings.Contains(rel.stderr, "give --expose-argv") {
		t.Errorf("dispatch of ./tool.sh without --expose-argv: exit %d, stderr %q; want a failure and the hint", rel.code, rel.stderr)
	}
}
