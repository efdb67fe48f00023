package leadrun

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/protocol"
)

// State is what the sidecar publishes: over HTTP (GET /token) and in the token file.
type State struct {
	// Leader is true while this pod holds the Lease and its safe-work deadline has not passed.
	Leader bool `json:"leader"`
	// Epoch, Lease, Holder and FieldManager are the token (zero when not leading).
	Epoch        int64  `json:"epoch,omitempty"`
	Lease        string `json:"lease,omitempty"`
	Holder       string `json:"holder,omitempty"`
	FieldManager string `json:"fieldManager,omitempty"`
	// Deadline is the safe-work deadline as this process's clock reads it (RFC 3339); it moves forward
	// with each renewal. Stop work before it; present Epoch on every write regardless.
	Deadline *time.Time `json:"deadline,omitempty"`
}

// maxWatch bounds a long poll of GET /token?watch=EPOCH.
const maxWatch = 30 * time.Second

// Sidecar elects on a Lease and publishes the current token to the pod's other containers: over HTTP and
// in a file. Its readiness (GET /readyz) says that it works: the election runs and the apiserver answers
// it. Leadership has its own endpoint (GET /leader), so that a rolling update, whose new pods must turn
// ready while the old leader still holds the Lease, does not stall. It runs nothing itself.
type Sidecar struct {
	// TokenFile, if set, is rewritten (atomically, by rename) with the State as JSON at every change.
	TokenFile string
	// AcquireTimeout bounds the wait for the first leadership: Run returns an error wrapping
	// ErrNotAcquired when it has not led within it. 0 waits for ever.
	AcquireTimeout time.Duration

	api     *apiState
	running bool // the elector runs

	mu      sync.Mutex
	token   elector.Token
	changed chan struct{} // closed and replaced at every change
	e       *elector.Elector
}

// state is the current State; not leading once the deadline has passed, whatever the last change said.
func (s *Sidecar) state() (State, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.changed == nil {
		s.changed = make(chan struct{})
	}
	if s.token.IsZero() || s.e == nil || s.e.Token() != s.token {
		return State{}, s.changed
	}
	d := s.e.Deadline()
	return State{Leader: true, Epoch: s.token.Epoch, Lease: s.token.Lease.String(), Holder: s.token.Holder,
		FieldManager: s.token.FieldManager(), Deadline: &d}, s.changed
}

func (s *Sidecar) set(t elector.Token) {
	s.mu.Lock()
	s.token = t
	if s.changed != nil {
		close(s.changed)
	}
	s.changed = make(chan struct{})
	s.mu.Unlock()
}

// Run elects with cfg (whose OnStartedLeading it sets) and serves on listener until ctx ends. The token
// file and the HTTP answers follow each acquisition and the end of each leadership. While not leading, it
// gives up with a *PermanentError when the apiserver answers one kind of request PermanentAttempts times
// in a row with a permanent error (IsPermanent), and with an error wrapping ErrNotAcquired when AcquireTimeout passes
// before the first leadership.
func (s *Sidecar) Run(ctx context.Context, cfg elector.Config, listener net.Listener, opts ...elector.Option) error {
	log := logr.FromContextOrDiscard(ctx)
	runCtx, api, stop := guard(ctx, &cfg, s.AcquireTimeout)
	defer stop(nil)
	cfg.OnStartedLeading = func(lctx context.Context, t elector.Token) {
		api.setLeading(true)
		s.set(t)
		s.writeFile(log)
		<-lctx.Done()
		s.set(elector.Token{})
		s.writeFile(log)
		api.setLeading(false)
	}
	e, err := elector.New(cfg, opts...)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.e, s.api, s.running = e, api, true
	s.mu.Unlock()
	s.writeFile(log)
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(listener) }()
	runErr := e.Run(runCtx)
	s.mu.Lock()
	s.running = false
	s.mu.Unlock()
	if runErr == nil {
		runErr = gaveUp(runCtx)
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(shutdownCtx)
	if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serving the token on %s: %w", listener.Addr(), err)
	}
	return runErr
}

// ready reports whether the election runs and the last request it sent to the apiserver was answered as
// a working election's are (success, a conflict, a missing Lease), and why not.
func (s *Sidecar) ready() (bool, string) {
	s.mu.Lock()
	running, api := s.running, s.api
	s.mu.Unlock()
	switch {
	case !running:
		return false, "the election does not run"
	case !api.ready():
		return false, "the apiserver has not answered the election's last request"
	}
	return true, ""
}

// Handler serves GET /token (the State as JSON: 200 while leading, 503 when not; with ?watch=EPOCH it
// waits, up to 30 s, until the epoch differs from EPOCH, 0 meaning "not leading"), GET /leader (200 while
// leading, 503 when not), GET /readyz (200 while the election runs and the apiserver answers it,
// whoever leads) and GET /healthz (200).
func (s *Sidecar) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /token", func(w http.ResponseWriter, r *http.Request) {
		st, changed := s.state()
		if raw := r.URL.Query().Get("watch"); raw != "" {
			seen, err := strconv.ParseInt(raw, 10, 64)
			if err != nil || seen < 0 || seen > protocol.MaxEpoch || strconv.FormatInt(seen, 10) != raw {
				http.Error(w, fmt.Sprintf("query parameter watch=%q is not an epoch in [0, %d]", raw, protocol.MaxEpoch), http.StatusBadRequest)
				return
			}
			timeout := time.NewTimer(maxWatch)
			defer timeout.Stop()
		wait:
			for st.Epoch == seen {
				select {
				case <-changed:
					st, changed = s.state()
				case <-timeout.C:
					break wait
				case <-r.Context().Done():
					return
				}
			}
		}
		w.Header().Set("Content-Type", "application/json")
		if !st.Leader {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(st)
	})
	mux.HandleFunc("GET /leader", func(w http.ResponseWriter, r *http.Request) {
		if st, _ := s.state(); !st.Leader {
			http.Error(w, "not leading", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("leading\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if ok, why := s.ready(); !ok {
			http.Error(w, why, http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	return mux
}

// writeFile replaces the token file with the current State (write to a temporary file, then rename, so a
// reader never sees half a token).
func (s *Sidecar) writeFile(log logr.Logger) {
	if s.TokenFile == "" {
		return
	}
	st, _ := s.state()
	b, err := json.Marshal(st)
	if err == nil {
		tmp := filepath.Join(filepath.Dir(s.TokenFile), "."+filepath.Base(s.TokenFile)+".tmp")
		if err = os.WriteFile(tmp, append(b, '\n'), 0o644); err == nil {
			err = os.Rename(tmp, s.TokenFile)
		}
	}
	if err != nil {
		log.Error(err, "Cannot write the token file", "path", s.TokenFile)
	}
}
