package seccomp

import (
	"fmt"
	"sync"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Cache compiles each distinct profile once (keyed by Digest) and hands out
// the same Program afterwards. Concurrent callers asking for a profile that is
// being compiled wait for that compilation instead of starting another.
// A failed compilation is handed to the callers waiting for it and then
// forgotten, so a later call tries again.
// The zero value is ready to use; it is safe for concurrent use.
type Cache struct {
	mu      sync.Mutex
	entries map[string]*cacheEntry
	compile func(*specs.LinuxSeccomp) (Program, error) // Compile unless a test swaps it
}

type cacheEntry struct {
	done chan struct{}
	prog Program
	err  error
}

// Program returns the compiled program for profile. Callers must not modify
// the returned Program: it is shared.
func (c *Cache) Program(profile *specs.LinuxSeccomp) (Program, error) {
	key, err := Digest(profile)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if c.entries == nil {
		c.entries = make(map[string]*cacheEntry)
	}
	e, ok := c.entries[key]
	if !ok {
		e = &cacheEntry{done: make(chan struct{})}
		c.entries[key] = e
	}
	compile := c.compile
	c.mu.Unlock()
	if ok {
		<-e.done
		return e.prog, e.err
	}
	if compile == nil {
		compile = Compile
	}
	e.prog, e.err = compile(profile)
	if e.err != nil {
		e.err = fmt.Errorf("seccomp cache %s: %w", key, e.err)
		c.mu.Lock()
		delete(c.entries, key)
		c.mu.Unlock()
	}
	close(e.done)
	return e.prog, e.err
}

// Len reports how many distinct profiles the cache holds.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}
