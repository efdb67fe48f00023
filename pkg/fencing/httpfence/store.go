package httpfence

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/pkg/fencing/sqlfence"
	"github.com/fencekit/fencekit/pkg/protocol"
)

// Store keeps, per fenced key, the highest epoch it has admitted.
type Store interface {
	// Admit admits token for key if no higher epoch has been admitted for key, raises key to token.Epoch
	// and runs fn, all while no other Admit of key runs: for each key, admissions and the fn they run are
	// serialised, in non-decreasing epoch order. A lower epoch is refused with a *fencing.Error of
	// ReasonStale (fencing.IsStale) naming the key and both epochs, and fn does not run. An error from fn
	// is returned as is; whether the raise is then kept is up to the Store.
	Admit(ctx context.Context, key string, token elector.Token, fn func(ctx context.Context) error) error
}

// MemoryStore is a Store in the process's memory. It does not survive a restart: a restarted service
// admits any epoch for a key until a request raises it again, so use it where the fenced state itself
// lives in the process (or in tests), and the PostgreSQL store where it lives in PostgreSQL. Keys are never
// forgotten: derive them from a bounded set (resource names), not from arbitrary client input.
type MemoryStore struct {
	mu   sync.Mutex
	keys map[string]*memoryKey
}

type memoryKey struct {
	lock    chan struct{} // a mutex whose waiters can give up when their request ends
	epoch   int64
	waiting atomic.Int32 // Admit calls waiting for lock
}

// NewMemoryStore returns an empty MemoryStore.
func NewMemoryStore() *MemoryStore { return &MemoryStore{keys: map[string]*memoryKey{}} }

var _ Store = (*MemoryStore)(nil)

func (s *MemoryStore) key(key string) *memoryKey {
	s.mu.Lock()
	defer s.mu.Unlock()
	k, ok := s.keys[key]
	if !ok {
		k = &memoryKey{lock: make(chan struct{}, 1)}
		s.keys[key] = k
	}
	return k
}

// Admit implements Store. The raise is kept even if fn fails (the epoch was legitimately presented).
// Waiting for the key gives up with ctx's error when ctx ends.
func (s *MemoryStore) Admit(ctx context.Context, key string, token elector.Token, fn func(ctx context.Context) error) error {
	if err := sqlfence.CheckEpoch("key "+key, token.Epoch); err != nil {
		return err
	}
	k := s.key(key)
	k.waiting.Add(1)
	select {
	case k.lock <- struct{}{}:
		k.waiting.Add(-1)
	case <-ctx.Done():
		k.waiting.Add(-1)
		return fmt.Errorf("waiting for fenced key %s: %w", key, ctx.Err())
	}
	defer func() { <-k.lock }()
	if k.epoch > token.Epoch {
		return staleKey(key, token, k.epoch)
	}
	k.epoch = token.Epoch
	return fn(ctx)
}

// Epoch returns the highest epoch admitted for key (0 if none). It waits while a request holds the key.
func (s *MemoryStore) Epoch(key string) int64 {
	k := s.key(key)
	k.lock <- struct{}{}
	defer func() { <-k.lock }()
	return k.epoch
}

func staleKey(key string, token elector.Token, admitted int64) *fencing.Error {
	return &fencing.Error{Reason: protocol.ReasonStale, Resource: key, Lease: leaseOf(token), Epoch: token.Epoch, LeaseEpoch: admitted,
		Message: fmt.Sprintf("stale epoch %d: key %s has admitted epoch %d", token.Epoch, key, admitted)}
}

func leaseOf(t elector.Token) string {
	if t.Lease.Name == "" {
		return ""
	}
	return t.Lease.String()
}
