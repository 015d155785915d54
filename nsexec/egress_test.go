//go:build linux

package nsexec

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

func init() {
	probes["egress"] = probeEgress
	probes["egress-epipe"] = probeEgressEPIPE
}

// probeEgressEPIPE writes to the forwarder after the proxy closed its end,
// so the init's relay writes to a closed socket.
func probeEgressEPIPE() error {
	for range 20 {
		c, err := net.DialTimeout("tcp", "127.0.0.1:3128", 5*time.Second)
		if err != nil {
			return err
		}
		buf := make([]byte, 64<<10)
		for range 64 {
			if _, err := c.Write(buf); err != nil {
				break
			}
		}
		c.Close()
	}
	time.Sleep(100 * time.Millisecond)
	return nil
}

// probeEgress says hello through the forwarder at 127.0.0.1:3128 and
// prints the answer; then it tries the host's loopback service named by
// argv[1] directly, which must fail.
func probeEgress() error {
	c, err := net.DialTimeout("tcp", "127.0.0.1:3128", 5*time.Second)
	if err != nil {
		return err
	}
	fmt.Fprintln(c, "hello")
	line, err := bufio.NewReader(c).ReadString('\n')
	c.Close()
	if err != nil {
		return err
	}
	fmt.Print("answer: ", line)
	if _, err := net.DialTimeout("tcp", os.Getenv("HOST_SERVICE"), time.Second); err == nil {
		fmt.Println("host loopback: reached")
	} else {
		fmt.Println("host loopback: unreachable")
	}
	return nil
}

// TestEgressForwarderRelaysToTheSocket: the init relays a connection to its
// loopback port to the bound unix socket, byte for byte, and that is the
// only way out: the host's loopback service is not reachable.
func TestEgressForwarderRelaysToTheSocket(t *testing.T) {
	asRootAndNobody(t, func(t *testing.T) {
		sock := egressSocket(t, func(c net.Conn) {
			line, _ := bufio.NewReader(c).ReadString('\n')
			fmt.Fprintf(c, "proxy got %s", line)
			c.Close()
		})
		host, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer host.Close()
		cfg := probeConfig(t, "egress")
		cfg.Env = append(cfg.Env, "HOST_SERVICE="+host.Addr().String())
		cfg.Network = NetworkLoopback
		cfg.Egress = &Egress{Port: 3128, Socket: "/tmp/.moat-egress.sock"}
		cfg.Mounts = append(cfg.Mounts, specs.Mount{Source: sock, Destination: "/tmp/.moat-egress.sock", Options: []string{"ro"}})
		r := mustRun(t, cfg)
		if want := "answer: proxy got hello\nhost loopback: unreachable\n"; r.stdout != want {
			t.Errorf("stdout %q, want %q (stderr %q)", r.stdout, want, r.stderr)
		}
	})
}

// egressSocket serves a unix socket at a fresh path with serve, in a 0711
// directory the sandbox's host id can traverse.
func egressSocket(t *testing.T, serve func(net.Conn)) string {
	dir := t.TempDir()
	os.Chmod(dir, 0o711)
	sock := filepath.Join(dir, "egress.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	os.Chmod(sock, 0o666)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go serve(c)
		}
	}()
	return sock
}

// TestEgressRelayRaisesNoSIGPIPE: the init forwards every signal it gets
// to the tool, so its relay must never raise SIGPIPE on itself when the
// proxy closes first; a shell as the tool would die of it.
func TestEgressRelayRaisesNoSIGPIPE(t *testing.T) {
	asRootAndNobody(t, func(t *testing.T) {
		sock := egressSocket(t, func(c net.Conn) { c.Close() })
		cfg := probeConfig(t, "egress-epipe")
		cfg.Args = []string{"/bin/sh", "-c", "/probe; echo shell alive"}
		cfg.Network = NetworkLoopback
		cfg.Egress = &Egress{Port: 3128, Socket: "/tmp/.moat-egress.sock"}
		cfg.Mounts = append(cfg.Mounts, specs.Mount{Source: sock, Destination: "/tmp/.moat-egress.sock", Options: []string{"ro"}})
		if r := mustRun(t, cfg); r.stdout != "shell alive\n" {
			t.Errorf("stdout %q, stderr %q", r.stdout, r.stderr)
		}
	})
}

func TestEgressNeedsLoopback(t *testing.T) {
	cfg := &Config{Args: []string{"/bin/true"}, Egress: &Egress{Port: 3128, Socket: "/tmp/s"}}
	_, err := Start(t.Context(), cfg, Stdio{})
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Field != "network" || !strings.Contains(ce.Reason, "egress needs lo up") {
		t.Errorf("egress without loopback: %v", err)
	}
}
