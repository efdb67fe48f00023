package leasepolicy_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fencekit/fencekit/pkg/protocol"
	"github.com/fencekit/fencekit/test/util/testenv"
)

// leaseAuditPolicy logs every Lease request at Metadata level (the least that carries admission
// annotations) once it completes, and nothing else.
const leaseAuditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  resources:
  - group: coordination.k8s.io
    resources: ["leases"]
- level: None
`

// auditEvent is the part of an audit.k8s.io/v1 Event this test reads.
type auditEvent struct {
	AuditID        string            `json:"auditID"`
	Stage          string            `json:"stage"`
	Verb           string            `json:"verb"`
	ResponseStatus *metav1.Status    `json:"responseStatus"`
	Annotations    map[string]string `json:"annotations"`
}

// auditIDs records the Audit-Id kube-apiserver returns for each request of a client.
type auditIDs struct {
	mu   sync.Mutex
	last string
}

func (a *auditIDs) Last() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.last
}

type auditIDTransport struct {
	next http.RoundTripper
	ids  *auditIDs
}

func (t auditIDTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	res, err := t.next.RoundTrip(req)
	if res != nil {
		t.ids.mu.Lock()
		t.ids.last = res.Header.Get("Audit-Id")
		t.ids.mu.Unlock()
	}
	return res, err
}

// auditedClient is a client with w's identity that records the audit ID of its last request.
func auditedClient(t *testing.T, e *testenv.Env, w testenv.Worker) (client.Client, *auditIDs) {
	t.Helper()
	ids := &auditIDs{}
	cfg := rest.CopyConfig(w.Config)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return auditIDTransport{next: rt, ids: ids} })
	c, err := client.New(cfg, client.Options{Scheme: e.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c, ids
}

// completedEvent polls the audit log at path until it holds the ResponseComplete event of the request
// auditID, and returns it.
func completedEvent(t *testing.T, path, auditID string) auditEvent {
	t.Helper()
	if auditID == "" {
		t.Fatal("the apiserver returned no Audit-Id header")
	}
	var found *auditEvent
	testenv.Eventually(t, "the audit event of request "+auditID, func() (bool, string) {
		f, err := os.Open(path)
		if err != nil {
			return false, err.Error()
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
		lines := 0
		for sc.Scan() {
			lines++
			var ev auditEvent
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
				// The last line may be half written: read again.
				return false, fmt.Sprintf("audit log %s, line %d: %v", path, lines, err)
			}
			if ev.AuditID == auditID && ev.Stage == "ResponseComplete" {
				found = &ev
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d events, none is it (scan error: %v)", lines, sc.Err())
	})
	return *found
}

// policyAnnotations are the event's annotations written by the Lease policy, without its name's prefix.
func policyAnnotations(ev auditEvent) map[string]string {
	const prefix = "fencekit-fenced-leases/"
	got := map[string]string{}
	for k, v := range ev.Annotations {
		if after, ok := strings.CutPrefix(k, prefix); ok {
			got[after] = v
		}
	}
	return got
}

// TestLeasePolicyAuditAnnotations: a refusal by the Lease policy happens inside kube-apiserver, where no
// fencekit code sees it; the policy's audit annotations make the apiserver's audit log say what each
// refused (and admitted) Lease write presented and found: the presented epoch, the epoch and acquirer
// before and after. It runs its own control plane, with an audit policy and log file.
func TestLeasePolicyAuditAnnotations(t *testing.T) {
	dir := t.TempDir()
	policyFile, logFile := filepath.Join(dir, "audit-policy.yaml"), filepath.Join(dir, "audit.log")
	if err := os.WriteFile(policyFile, []byte(leaseAuditPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	aenv, err := testenv.Start(testenv.WithLeasePolicy(),
		testenv.WithAPIServerArg("audit-policy-file", policyFile),
		testenv.WithAPIServerArg("audit-log-path", logFile),
		testenv.WithAPIServerArg("audit-log-format", "json"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := aenv.Stop(); err != nil {
			t.Errorf("stopping the audited control plane: %v", err)
		}
	})

	ctx := t.Context()
	ns := aenv.Namespace(t)
	a, b := aenv.NewWorker(t, ns, "worker-a"), aenv.NewWorker(t, ns, "worker-b")
	ac, aIDs := auditedClient(t, aenv, a)
	bc, bIDs := auditedClient(t, aenv, b)
	a.Client, b.Client = ac, bc

	a.Acquire(t, ns, "orders-writer", 5)
	created := completedEvent(t, logFile, aIDs.Last())
	b.Acquire(t, ns, "orders-writer", 6)
	acquired := completedEvent(t, logFile, bIDs.Last())

	read := func() *coordinationv1.Lease {
		var l coordinationv1.Lease
		if err := aenv.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "orders-writer"}, &l); err != nil {
			t.Fatal(err)
		}
		return &l
	}
	// worker-a, stale, writes its own acquisition at epoch 5 over worker-b's at 6.
	l := read()
	testenv.AcquiredBy(l, a.User, a.Holder, 5, 15*time.Second)
	staleErr := ac.Update(ctx, l, testenv.Presenting(5))
	stale := completedEvent(t, logFile, aIDs.Last())
	// worker-b renews without presenting its epoch, as a plain client would.
	l = read()
	l.Spec.LeaseDurationSeconds = ptr.To[int32](30)
	untokenedErr := bc.Update(ctx, l)
	untokened := completedEvent(t, logFile, bIDs.Last())
	// worker-b rewrites the acquirer, long, presenting an epoch too long to show: each value stays short.
	l = read()
	l.Annotations[protocol.AcquirerAnnotation] = strings.Repeat("x", 200)
	longErr := bc.Update(ctx, l, client.FieldOwner(protocol.FieldManagerPrefix+strings.Repeat("7", 40)))
	long := completedEvent(t, logFile, bIDs.Last())

	for _, tc := range []struct {
		name    string
		ev      auditEvent
		err     error
		verb    string
		code    int32
		message string // the refusal's, "" admitted
		want    map[string]string
	}{
		{"worker-a creates the Lease at epoch 5", created, nil, "create", http.StatusCreated, "",
			map[string]string{"presented-epoch": "5", "new-epoch": "5", "acquirer": "worker-a-user"}},
		{"worker-b acquires it at epoch 6", acquired, nil, "update", http.StatusOK, "",
			map[string]string{"presented-epoch": "6", "old-epoch": "5", "new-epoch": "6", "acquirer": "worker-b-user", "old-acquirer": "worker-a-user"}},
		{"worker-a, stale, writes epoch 5 over 6", stale, staleErr, "update", http.StatusForbidden,
			"fenced lease orders-writer: epoch may not go down, from 6 to 5",
			map[string]string{"presented-epoch": "5", "old-epoch": "6", "new-epoch": "5", "acquirer": "worker-a-user", "old-acquirer": "worker-b-user"}},
		{"worker-b renews presenting nothing", untokened, untokenedErr, "update", http.StatusForbidden,
			`fenced lease orders-writer: a write that acquires, renews or releases it at epoch 6 must present that epoch in the request: send fieldManager fencing.fencekit.io/epoch=6 (this request sent "")`,
			map[string]string{"old-epoch": "6", "new-epoch": "6", "acquirer": "worker-b-user", "old-acquirer": "worker-b-user"}},
		{"worker-b presents a long epoch and names a long acquirer", long, longErr, "update", http.StatusForbidden,
			"fenced lease orders-writer: the acquirer of epoch 6 is worker-b-user and cannot change without a new epoch",
			map[string]string{"presented-epoch": strings.Repeat("7", 24) + "...", "old-epoch": "6", "new-epoch": "6",
				"acquirer": strings.Repeat("x", 128) + "...", "old-acquirer": "worker-b-user"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.message == "" {
				if tc.err != nil {
					t.Fatalf("refused: %v", tc.err)
				}
			} else if !apierrors.IsForbidden(tc.err) || !strings.Contains(tc.err.Error(), tc.message) {
				t.Fatalf("want Forbidden %q, got %v", tc.message, tc.err)
			}
			if tc.ev.Verb != tc.verb {
				t.Errorf("audit event verb %q, want %q", tc.ev.Verb, tc.verb)
			}
			if tc.ev.ResponseStatus == nil {
				t.Fatal("the audit event has no responseStatus")
			}
			if got := tc.ev.ResponseStatus.Code; got != tc.code {
				t.Errorf("audit event responseStatus.code %d, want %d", got, tc.code)
			}
			if tc.message != "" {
				var status apierrors.APIStatus
				if !errors.As(tc.err, &status) || status.Status().Code != tc.ev.ResponseStatus.Code {
					t.Errorf("the client saw %v, the audit event code %d", tc.err, tc.ev.ResponseStatus.Code)
				}
				if tc.ev.ResponseStatus.Reason != metav1.StatusReasonForbidden || !strings.Contains(tc.ev.ResponseStatus.Message, tc.message) {
					t.Errorf("audit event responseStatus: reason %q, message %q; want Forbidden, %q", tc.ev.ResponseStatus.Reason, tc.ev.ResponseStatus.Message, tc.message)
				}
			}
			if diff := cmp.Diff(tc.want, policyAnnotations(tc.ev)); diff != "" {
				t.Errorf("the Lease policy's audit annotations (-want +got):\n%s", diff)
			}
		})
	}
}
