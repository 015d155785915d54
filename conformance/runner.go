package conformance

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// RunnerName is the file name (argv[0] base) under which the test binary
// acts as the conformance runner tool program.
const RunnerName = "moat-conformance-runner"

// isRunner reports whether this process was started as the runner.
func isRunner() bool { return filepath.Base(os.Args[0]) == RunnerName }

// runnerMain is the reference runner program (contract 9.2), answering on
// args.behavior. It never returns.
func runnerMain() {
	in, _ := io.ReadAll(os.Stdin)
	var msg struct {
		Tool           string          `json:"tool"`
		Args           json.RawMessage `json:"args"`
		IdempotencyKey string          `json:"idempotencyKey"`
	}
	if strings.TrimSpace(string(in)) != "" {
		if err := json.Unmarshal(in, &msg); err != nil {
			fmt.Fprint(os.Stderr, "bad protocol input")
			os.Exit(2)
		}
	}
	var args map[string]json.RawMessage
	_ = json.Unmarshal(msg.Args, &args)
	str := func(k string) string {
		var s string
		_ = json.Unmarshal(args[k], &s)
		return s
	}
	num := func(k string, def float64) float64 {
		v := def
		if raw, ok := args[k]; ok && string(raw) != "null" {
			_ = json.Unmarshal(raw, &v)
		}
		return v
	}
	write := func(v any) {
		b, _ := json.Marshal(v)
		os.Stdout.Write(b)
	}
	switch str("behavior") {
	case "echo":
		payload := args["payload"]
		if payload == nil {
			payload = json.RawMessage("null")
		}
		write(map[string]any{"tool": msg.Tool, "payload": payload, "idempotencyKey": msg.IdempotencyKey})
	case "read-env":
		v, ok := os.LookupEnv(str("name"))
		if !ok {
			write(map[string]any{"value": nil})
		} else {
			write(map[string]any{"value": v})
		}
	case "sleep":
		time.Sleep(time.Duration(num("ms", 100000)) * time.Millisecond)
		write(map[string]any{"slept": true})
	case "huge":
		chunk := []byte(strings.Repeat("x", 65536))
		for range int(num("chunks", 128)) {
			if _, err := os.Stdout.Write(chunk); err != nil {
				break
			}
		}
	case "exit":
		if s := str("stderr"); s != "" {
			fmt.Fprint(os.Stderr, s)
		}
		os.Exit(int(num("code", 1)))
	case "garbage":
		fmt.Print("this is not json")
	case "workdir":
		entries, _ := os.ReadDir(".")
		_ = os.WriteFile("marker.txt", []byte("x"), 0o644)
		write(map[string]any{"before": len(entries)})
	default:
		if probe, ok := probes[str("behavior")]; ok {
			write(probe(args))
		} else {
			var b any
			_ = json.Unmarshal(args["behavior"], &b)
			write(map[string]any{"unknown": b})
		}
	}
	os.Exit(0)
}

// probes are the runner behaviours beyond the reference's, used by the
// isolation and hostile checks; each returns its JSON result.
var probes = map[string]func(args map[string]json.RawMessage) any{}
