package ledger

import (
	"context"
	"sync"
)

// Memory is the in-memory two-phase ledger (memoryEffectLedger): it keeps
// every row in call order and persists nothing. It is safe for concurrent
// use.
type Memory struct {
	mu      sync.Mutex
	intents []Intent
	records []Record
}

// Intent stores the intent row.
func (m *Memory) Intent(_ context.Context, i Intent) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.intents = append(m.intents, i)
	return nil
}

// Record stores the outcome row.
func (m *Memory) Record(_ context.Context, r Record) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.records = append(m.records, r)
	return nil
}

// Intents returns a copy of the intent rows, in call order.
func (m *Memory) Intents() []Intent {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]Intent(nil), m.intents...)
}

// Records returns a copy of the outcome rows, in call order.
func (m *Memory) Records() []Record {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]Record(nil), m.records...)
}
