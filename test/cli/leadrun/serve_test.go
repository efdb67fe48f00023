package leadrun_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/fencekit/fencekit/internal/cli/leadrun"
	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/protocol"
	"github.com/fencekit/fencekit/test/util/testenv"
)

type sidecar struct {
	url, file string
	stop      context.CancelFunc
	done      chan error
}

func startSidecar(t *testing.T, cfg elector.Config, identity string) *sidecar {
	t.Helper()
	cfg.Identity = identity
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	sc := &sidecar{url: "http://" + l.Addr().String(), file: filepath.Join(t.TempDir(), "token.json"), stop: cancel, done: make(chan error, 1)}
	s := &leadrun.Sidecar{TokenFile: sc.file}
	go func() { sc.done <- s.Run(ctx, cfg, l) }()
	t.Cleanup(func() { cancel(); <-sc.done }) //nolint:errcheck // Run ends with the cancellation; its tests check its error where it matters
	return sc
}

func get(t *testing.T, url string) (int, leadrun.State) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st leadrun.State
	if resp.Header.Get("Content-Type") == "application/json" {
		if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
			t.Fatal(err)
		}
	} else {
		_, _ = io.Copy(io.Discard, resp.Body)
	}
	return resp.StatusCode, st
}

// TestSidecarPublishesTheToken: the leader's sidecar serves its token and writes it to the file; both
// are ready (the election runs), only the leader's /leader answers 200; when the leader releases, a long
// poll on the standby returns its new token.
func TestSidecarPublishesTheToken(t *testing.T) {
	cfg := config(t, "sidecar")
	a := startSidecar(t, cfg, "pod-a")
	testenv.Eventually(t, "pod-a leads", func() (bool, string) {
		code, st := get(t, a.url+"/token")
		return code == http.StatusOK && st.Leader, fmt.Sprintf("%d %+v", code, st)
	})
	_, st := get(t, a.url+"/token")
	epoch := lease(t, cfg).Annotations[protocol.EpochAnnotation]
	if strconv.FormatInt(st.Epoch, 10) != epoch || st.Holder != "pod-a" || st.FieldManager != protocol.FieldManagerFor(st.Epoch) ||
		st.Lease != cfg.Namespace+"/"+cfg.Name || st.Deadline == nil {
		t.Errorf("pod-a serves %+v; the Lease is at epoch %s", st, epoch)
	}
	b, err := os.ReadFile(a.file)
	if err != nil {
		t.Fatal(err)
	}
	var fromFile leadrun.State
	if err := json.Unmarshal(b, &fromFile); err != nil || fromFile.Epoch != st.Epoch || !fromFile.Leader {
		t.Errorf("token file %s = %q (%v), want epoch %d", a.file, b, err, st.Epoch)
	}
	for _, path := range []string{"/readyz", "/leader"} {
		if code, _ := get(t, a.url+path); code != http.StatusOK {
			t.Errorf("the leader's %s = %d", path, code)
		}
	}

	b2 := startSidecar(t, cfg, "pod-b")
	testenv.Eventually(t, "pod-b serves", func() (bool, string) {
		code, _ := get(t, b2.url+"/healthz")
		return code == http.StatusOK, fmt.Sprint(code)
	})
	if code, st := get(t, b2.url+"/token"); code != http.StatusServiceUnavailable || st.Leader {
		t.Errorf("the standby's /token = %d %+v, want 503 and not leader", code, st)
	}
	testenv.Eventually(t, "the standby is ready", func() (bool, string) {
		code, _ := get(t, b2.url+"/readyz")
		return code == http.StatusOK, fmt.Sprint(code)
	})
	if code, _ := get(t, b2.url+"/leader"); code != http.StatusServiceUnavailable {
		t.Errorf("the standby's /leader = %d, want 503", code)
	}
	if code, _ := get(t, b2.url+"/token?watch=-1"); code != http.StatusBadRequest {
		t.Errorf("watch=-1 answered %d, want 400", code)
	}

	watched := make(chan leadrun.State, 1)
	go func() {
		var st leadrun.State
		defer func() { watched <- st }()
		resp, err := http.Get(b2.url + "/token?watch=0") // returns once pod-b leads
		if err != nil {
			return
		}
		defer resp.Body.Close()
		_ = json.NewDecoder(resp.Body).Decode(&st)
	}()
	a.stop() // pod-a releases
	select {
	case got := <-watched:
		if !got.Leader || got.Holder != "pod-b" || got.Epoch != st.Epoch+1 {
			t.Errorf("the long poll returned %+v, want pod-b at epoch %d", got, st.Epoch+1)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the long poll did not return after pod-a released")
	}
	testenv.Eventually(t, "pod-a's token file says it no longer leads", func() (bool, string) {
		b, _ := os.ReadFile(a.file)
		var st leadrun.State
		return json.Unmarshal(b, &st) == nil && !st.Leader, string(b)
	})
}
