package oci

import (
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/conformance/testenv"
	"github.com/moat-sandbox/moat/nsexec"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// TestTranslateIdentity: as root, additionalGids become the sandbox's
// groups (each once), process.capabilities its sets, an ambient
// capability the kernel would not raise is noted, and binds keep their
// own maps, or with runc's idmap option the config's user namespace maps.
func TestTranslateIdentity(t *testing.T) {
	s := podmanSpec()
	s.Process.User.AdditionalGids = []uint32{0, 1, 10, 10, 2000}
	s.Process.Capabilities = &specs.LinuxCapabilities{
		Bounding:  []string{"CAP_CHOWN", "CAP_SETUID", "NET_BIND_SERVICE"},
		Effective: []string{"CAP_CHOWN"}, Permitted: []string{"CAP_CHOWN", "CAP_SETUID"},
		Inheritable: []string{"CAP_SETUID"}, Ambient: []string{"CAP_SETUID", "CAP_CHOWN"},
	}
	lm := []specs.LinuxIDMapping{{ContainerID: 0, HostID: 300000, Size: 65536}}
	s.Mounts = append(s.Mounts,
		specs.Mount{Destination: "/own", Type: "bind", Source: "/x", Options: []string{"rw"}, UIDMappings: lm, GIDMappings: lm},
		specs.Mount{Destination: "/asked", Type: "bind", Source: "/y", Options: []string{"rbind", "idmap"}})
	p, err := Translate(s, "/b", true)
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Config.Groups; !slices.Equal(got, []uint32{0, 1, 10, 2000}) {
		t.Errorf("groups %v", got)
	}
	chown, setuid, bind := uint64(1)<<0, uint64(1)<<7, uint64(1)<<10
	want := nsexec.Capabilities{Bounding: chown | setuid | bind, Effective: chown, Permitted: chown | setuid, Inheritable: setuid, Ambient: setuid | chown}
	if p.Config.Caps == nil || *p.Config.Caps != want {
		t.Errorf("caps %+v, want %+v", p.Config.Caps, want)
	}
	if !slices.ContainsFunc(p.Notes, func(n string) bool { return strings.Contains(n, "CAP_CHOWN") && strings.Contains(n, "not raised") }) {
		t.Errorf("no note on the ambient CAP_CHOWN the kernel would not raise: %q", p.Notes)
	}
	var own, asked *specs.Mount
	for i := range p.Config.Mounts {
		switch p.Config.Mounts[i].Destination {
		case "/own":
			own = &p.Config.Mounts[i]
		case "/asked":
			asked = &p.Config.Mounts[i]
		}
	}
	if own == nil || !slices.Equal(own.UIDMappings, lm) || !slices.Equal(own.GIDMappings, lm) {
		t.Errorf("a bind's own maps: %+v", own)
	}
	// No user namespace maps in the config: moat's range id-maps every
	// bind, and the option goes.
	if asked == nil || asked.UIDMappings != nil || slices.Contains(asked.Options, "idmap") || !p.IDMapMounts {
		t.Errorf("idmap without maps: %+v (id-mapped mounts %v)", asked, p.IDMapMounts)
	}
	s.Linux.Namespaces = append(s.Linux.Namespaces, specs.LinuxNamespace{Type: "user"})
	s.Linux.UIDMappings, s.Linux.GIDMappings = lm, lm
	if p, err = Translate(s, "/b", true); err != nil {
		t.Fatal(err)
	}
	for _, m := range p.Config.Mounts {
		if m.Destination == "/asked" && (!slices.Equal(m.UIDMappings, lm) || !slices.Contains(m.Options, "idmap")) {
			t.Errorf("idmap with the config's maps: %+v", m)
		}
	}
	s.Mounts = append(s.Mounts, specs.Mount{Destination: "/half", Type: "bind", Source: "/z", UIDMappings: lm})
	var ue *UnsupportedError
	if _, err := Translate(s, "/b", true); !errors.As(err, &ue) || ue.Field != "mounts[11].uidMappings" {
		t.Errorf("a bind with a uid map alone: %v", err)
	}
}

// TestTranslateIdentityRootless: rootless (outside an engine's user
// namespace) a supplementary group other than the primary gid, a bind's
// own maps and the idmap option are each refused with the reason; the
// primary gid alone is accepted.
func TestTranslateIdentityRootless(t *testing.T) {
	if os.Geteuid() == 0 && !testenv.ReRun() {
		testenv.RunAsUser(t, testenv.NobodyUID, testenv.NobodyGID)
		return
	}
	s := podmanSpec()
	s.Process.User.AdditionalGids = []uint32{s.Process.User.GID}
	if p, err := Translate(s, "/b", false); err != nil || len(p.Config.Groups) != 1 {
		t.Fatalf("the primary gid alone: %+v, %v", p, err)
	}
	lm := []specs.LinuxIDMapping{{ContainerID: 0, HostID: 300000, Size: 65536}}
	for field, edit := range map[string]func(*specs.Spec){
		"process.user.additionalGids[1]": func(s *specs.Spec) { s.Process.User.AdditionalGids = append(s.Process.User.AdditionalGids, 10) },
		"mounts[9].uidMappings": func(s *specs.Spec) {
			s.Mounts = append(s.Mounts, specs.Mount{Destination: "/v", Type: "bind", Source: "/x", UIDMappings: lm, GIDMappings: lm})
		},
		"mounts[9].options": func(s *specs.Spec) {
			s.Mounts = append(s.Mounts, specs.Mount{Destination: "/v", Type: "bind", Source: "/x", Options: []string{"idmap"}})
		},
	} {
		s := podmanSpec()
		s.Process.User.AdditionalGids = []uint32{s.Process.User.GID}
		edit(s)
		_, err := Translate(s, "/b", false)
		var ue *UnsupportedError
		if !errors.As(err, &ue) || ue.Field != field || !strings.Contains(ue.Reason, "rootless") {
			t.Errorf("%s: %v", field, err)
		}
	}
}
