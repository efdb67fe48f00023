package elector_test

import (
	"mime"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"

	"github.com/fencekit/fencekit/test/util/testenv"
)

// renewalLog records a client's requests on the Lease "lock" after its acquisition: each write's method,
// status and answer's content type, and the reads.
type renewalLog struct {
	mu       sync.Mutex
	acquired bool
	writes   []string // "PUT 200 application/vnd.kubernetes.protobuf", ...
	reads    int
}

func (l *renewalLog) wrap(rt http.RoundTripper) http.RoundTripper {
	return testenv.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(r)
		if err != nil || !strings.HasSuffix(r.URL.Path, "/leases/lock") {
			return resp, err
		}
		mediaType, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
		l.mu.Lock()
		defer l.mu.Unlock()
		switch {
		case !l.acquired:
		case r.Method == http.MethodGet:
			l.reads++
		default:
			l.writes = append(l.writes, r.Method+" "+http.StatusText(resp.StatusCode)+" "+mediaType)
		}
		return resp, err
	})
}

func (l *renewalLog) start() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.acquired = true
}

func (l *renewalLog) seen() (writes []string, reads int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.writes...), l.reads
}

// A holder's renewals read the resourceVersion of each answer, in protobuf (what client-go's Leases client
// sends and accepts when the config names no content type) and in JSON, and write the next renewal on it:
// every renewal is one Update that the apiserver accepts, with no conflict, re-read or patch in between,
// and the Lease stays led.
func TestRenewalsWriteOnTheAnswersResourceVersion(t *testing.T) {
	for _, configured := range []string{"", runtime.ContentTypeProtobuf, runtime.ContentTypeJSON} {
		contentType := configured
		if contentType == "" {
			contentType = runtime.ContentTypeProtobuf
		}
		t.Run("configured "+configured, func(t *testing.T) {
			ns, h := parallelLock(t)
			log := &renewalLog{}
			_, cfg := env.ElectorClient(t, ns, "a-user")
			cfg.ContentType, cfg.AcceptContentTypes = configured, configured
			cfg.Wrap(log.wrap)
			cs, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				t.Fatal(err)
			}
			ecfg := h.config(t, ns, "a")
			ecfg.Client = cs
			start(t, ecfg)
			h.wait(t, 10*time.Second)
			log.start()
			time.Sleep(10 * ecfg.RetryPeriod)
			writes, reads := log.seen()
			want := "PUT " + http.StatusText(http.StatusOK) + " " + contentType
			renewals := 0
			for _, w := range writes {
				if w != want {
					t.Errorf("a write of the led Lease was %q, want every one %q", w, want)
				}
				renewals++
			}
			if renewals < 5 {
				t.Errorf("%d renewals in %v at retryPeriod %v, want at least 5", renewals, 10*ecfg.RetryPeriod, ecfg.RetryPeriod)
			}
			if reads != 0 {
				t.Errorf("%d reads of the led Lease, want none", reads)
			}
			h.check(t)
		})
	}
}
