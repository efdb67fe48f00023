package attack

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/fencing"
)

// acquireSlack is added to the elector's own bound on an acquisition (LeaseDuration for the old holder's
// Lease to expire, RenewDeadline for fence-on-acquire): the machine is shared and loaded.
const acquireSlack = 10 * time.Second

// acquireBound is how long a new elector of the holder's user may take to lead: the old Lease expires
// (LeaseDuration), fence-on-acquire runs (at most PostAcquireTimeout = RenewDeadline), plus slack. A
// bound on the protocol's promise, not on speed.
const acquireBound = elector.DefaultLeaseDuration + elector.DefaultRenewDeadline + acquireSlack

// holderRun is one elector of the holder's user at the elector's defaults, with fence-on-acquire for
// FencedResources and objects, as pkg/elector and pkg/fencing document it.
type holderRun struct {
	identity string
	e        *elector.Elector
	release  bool // it releases the Lease when stopped (else it stops as a crash: the Lease must expire)
	cancel   context.CancelFunc
	done     chan struct{}
	leading  chan elector.Token

	mu sync.Mutex
	// fenceErr is the last error of its fence-on-acquire, fences how many ran.
	fenceErr error
	fences   int
}

// lastFence says how its fence-on-acquire went, for a report.
func (h *holderRun) lastFence() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.fenceErr == nil {
		return fmt.Sprintf("%d fence-on-acquire runs, the last without an error", h.fences)
	}
	msg, _, _ := strings.Cut(h.fenceErr.Error(), "\n")
	return fmt.Sprintf("%d fence-on-acquire runs, the last failed: %s", h.fences, msg)
}

// startElector starts the next elector of the holder's user.
func (w *world) startElector(release bool) (*holderRun, error) {
	w.electors++
	cs, err := kubernetes.NewForConfig(w.holderCfg)
	if err != nil {
		return nil, err
	}
	frs, err := fencing.FenceOnAcquireForConfig(w.holderCfg)
	if err != nil {
		return nil, err
	}
	objs, err := fencing.FenceObjectsOnAcquireForConfig(w.holderCfg)
	if err != nil {
		return nil, err
	}
	h := &holderRun{identity: fmt.Sprintf("%s-%d", holderName, w.electors), release: release, done: make(chan struct{}),
		leading: make(chan elector.Token, 1)}
	h.e, err = elector.New(elector.Config{
		Client: cs, Namespace: w.ns, Name: leaseName, Identity: h.identity,
		ReleaseOnCancel: ptr.To(release),
		PostAcquire: elector.JoinFences(frs, objs).Observe(func(context.Context, elector.Token) func(error) {
			return func(err error) {
				h.mu.Lock()
				defer h.mu.Unlock()
				h.fences++
				h.fenceErr = err
			}
		}),
		OnStartedLeading: func(ctx context.Context, tok elector.Token) {
			select {
			case h.leading <- tok:
			default:
			}
			<-ctx.Done()
		},
	}, elector.WithLogger(logr.Discard()))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	go func() {
		defer close(h.done)
		_ = h.e.Run(ctx)
	}()
	return h, nil
}

// stop stops the elector: it releases the Lease if it was started to, else it stops as a crashed process.
func (h *holderRun) stop() {
	h.cancel()
	<-h.done
}

// acquire stops the current holder (a release, or a crash if crash), starts a new elector of the holder's
// user and waits until it leads, within acquireBound. It returns the previous token, and an error if the
// elector never led (the new elector is then stopped).
func (w *world) acquire(crash bool) (elector.Token, error) {
	var old elector.Token
	if w.holder != nil {
		old = w.holder.e.Token()
		w.holder.stop()
	}
	h, err := w.startElector(!crash)
	if err != nil {
		return old, err
	}
	start := time.Now()
	select {
	case tok := <-h.leading:
		w.holder = h
		w.t.Logf("acquisition: elector %s leads at epoch %d after %v", h.identity, tok.Epoch, time.Since(start).Round(time.Millisecond))
		return old, nil
	case <-time.After(acquireBound):
	case <-w.t.Context().Done():
	}
	h.stop()
	bound, _ := w.boundCount()
	return old, fmt.Errorf("elector %s of the holder's user did not lead within %v (LeaseDuration %v + RenewDeadline %v + slack %v); %d FencedResources are bound to the Lease; %s",
		h.identity, acquireBound, elector.DefaultLeaseDuration, elector.DefaultRenewDeadline, acquireSlack, bound, h.lastFence())
}

// boundCount is the number of FencedResources bound to the world's Lease.
func (w *world) boundCount() (int, error) {
	var list fencingv1alpha1.FencedResourceList
	if err := env.Client.List(context.Background(), &list, client.InNamespace(w.ns)); err != nil {
		return 0, err
	}
	n := 0
	for _, fr := range list.Items {
		if fr.Spec.LeaseName == leaseName {
			n++
		}
	}
	return n, nil
}

// clearDeclarations deletes, as an admin, the FencedResources the attackers declared.
func (w *world) clearDeclarations() error {
	return env.Client.DeleteAllOf(context.Background(), &fencingv1alpha1.FencedResource{}, client.InNamespace(w.ns),
		client.MatchingLabels{declaredLabel: "true"})
}
