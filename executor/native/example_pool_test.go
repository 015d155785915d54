package native_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/moat-sandbox/moat/executor"
	"github.com/moat-sandbox/moat/executor/native"
	"github.com/moat-sandbox/moat/policies"
)

// With a warm pool, sandboxes are made ahead up to the point where they
// wait for their call, so a dispatch pays only for the tool; each serves
// one call and is destroyed.
func ExampleWithPool() {
	pol, err := policies.Builtin("shell")
	if err != nil {
		log.Fatal(err)
	}
	p, err := native.New(
		native.WithPolicy(pol),
		native.WithPool(1),
		// A mark left in /tmp would show a sandbox serving a second call.
		native.WithCommand("/bin/sh", "-c", `[ -e /tmp/mark ] && s=reused || s=fresh; : >/tmp/mark; echo "{\"sandbox\": \"$s\"}"`),
	)
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()
	for range 3 {
		awaitPool(p) // only so that the output is the same on every run: a dispatch never waits for the pool
		res, err := p.Dispatch(context.Background(), &executor.Request{Tool: "mark", RunID: "run-1", SpanID: "span-1", IdempotencyKey: "key"})
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(string(res))
	}
	s := p.PoolStats()
	fmt.Printf("hits %d, misses %d\n", s.Hits, s.Misses)
	// Output:
	// {"sandbox": "fresh"}
	// {"sandbox": "fresh"}
	// {"sandbox": "fresh"}
	// hits 3, misses 0
}

// awaitPool waits until p's pool has a sandbox ready.
func awaitPool(p *native.Provider) {
	deadline := time.Now().Add(30 * time.Second)
	for p.PoolStats().Ready == 0 {
		if s := p.PoolStats(); s.Failed > 0 || time.Now().After(deadline) {
			log.Fatalf("the pool has no sandbox ready: %+v", s)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
