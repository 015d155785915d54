//go:build linux

package nsexec

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// A Config mount nsexec cannot build as it says is refused before any
// sandbox starts, naming its JSON path.
func TestConfigMountRefused(t *testing.T) {
	for _, tc := range []struct {
		m     specs.Mount
		field string
	}{
		{specs.Mount{Type: "tmpfs", Source: "/etc", Destination: "/x"}, "mounts[0].source"},
		{specs.Mount{Type: "bind", Destination: "/x"}, "mounts[0].source"},
		{specs.Mount{Destination: "/x"}, "mounts[0].source"},
		{specs.Mount{Type: "proc", Destination: "/x"}, "mounts[0].type"},
		{specs.Mount{Type: "tmpfs", Destination: "x"}, "mounts[0].destination"},
		{specs.Mount{Type: "tmpfs", Destination: "/"}, "mounts[0].destination"},
		{specs.Mount{Type: "tmpfs", Destination: "/x", Options: []string{"size=0"}}, "mounts[0].options[0]"},
		{specs.Mount{Type: "tmpfs", Destination: "/x", Options: []string{"size=64M"}}, "mounts[0].options[0]"},
		{specs.Mount{Type: "tmpfs", Destination: "/x", Options: []string{"mode=99"}}, "mounts[0].options[0]"},
		{specs.Mount{Type: "tmpfs", Destination: "/x", Options: []string{"bind"}}, "mounts[0].options[0]"},
		{specs.Mount{Type: "tmpfs", Destination: "/x", Options: []string{"size=4096", "size=8192"}}, "mounts[0].options[1]"},
		{specs.Mount{Source: "/usr", Destination: "/x", Options: []string{"rw", "ro"}}, "mounts[0].options"},
		{specs.Mount{Source: "/usr", Destination: "/x", Options: []string{"suid"}}, "mounts[0].options[0]"},
		{specs.Mount{Source: "/usr", Destination: "/x", Options: []string{"rslave", "shared2"}}, "mounts[0].options[1]"},
	} {
		_, err := Start(context.Background(), &Config{Args: []string{"/bin/true"}, Mounts: []specs.Mount{tc.m}}, Stdio{})
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Field != tc.field {
			t.Errorf("%+v: got %v, want a *ConfigError at %s", tc.m, err, tc.field)
		}
	}
}

// A tmpfs in a Config is a fresh tmpfs, never a bind of the current
// directory (filepath.Abs of its empty source once made it one).
func TestTmpfsMountFresh(t *testing.T) {
	asRootAndNobody(t, func(t *testing.T) {
		cwd := t.TempDir()
		os.WriteFile(filepath.Join(cwd, "secret"), []byte("s3cret"), 0o644)
		t.Chdir(cwd)
		cfg := shell(t, "ls -A /s; echo x > /s/new; grep ' /s ' /proc/self/mountinfo")
		cfg.Mounts = []specs.Mount{{Type: "tmpfs", Destination: "/s", Options: []string{"size=1048576", "mode=0700"}}}
		r := mustRun(t, cfg)
		if strings.Contains(r.stdout, "secret") {
			t.Fatalf("the tmpfs shows the current directory:\n%s", r.stdout)
		}
		if _, err := os.Stat(filepath.Join(cwd, "new")); err == nil {
			t.Fatal("a write to the tmpfs landed in the current directory")
		}
		if !strings.Contains(r.stdout, " - tmpfs ") || !strings.Contains(r.stdout, "size=1024k") || !strings.Contains(r.stdout, "mode=700") {
			t.Fatalf("/s is not a 1 MiB tmpfs of mode 0700:\n%s", r.stdout)
		}
	})
}
