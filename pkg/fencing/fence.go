package fencing

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/internal/seal"
	"github.com/fencekit/fencekit/pkg/protocol"
)

// fenceWorkers bounds the concurrent writes of one fence-on-acquire.
const fenceWorkers = 16

// FenceOnAcquire returns an elector.Config.PostAcquire fence that raises every FencedResource bound to the
// acquired Lease to the new epoch before the elector hands leadership to user code, and declares it on the
// Lease (protocol.Fences{FencedResources: true}), so that fencekit's webhook admits the holder's writes on
// its watch-fed copy of the Lease (as an HDFS NameNode
// opens a new epoch on its journal before writing). From then on, a write by any earlier holder is refused
// by the apiserver, even if the new holder never writes.
//
// The resources are listed straight from the apiserver (c should not read from a cache that could miss a
// just-created resource) by the CRD's selectable fields spec.leaseName and spec.epoch (the declarations,
// then the ones a holder wrote), and each is raised with one patch, at most 16 at a time: fencing N
// resources takes 2 + N requests, and Kubernetes has no request that writes several objects. c's
// client-side rate limit applies to them: client-go's default (5 QPS, burst 10, what a rest.Config with
// QPS unset gives) lets (2 + N - 10) / 5 seconds pass before the last one is
// sent, and fits about 55 resources in the elector's default PostAcquireTimeout of 10 s, not 100 (18 s
// measured). Build the hook with FenceOnAcquireForConfig from a rest.Config instead: its client has no
// client-side limit (the apiserver's priority and fairness still applies), and 100 resources take well
// under a second (docs/benchmarks.md). Bring your own c only if it has no client-side limit either
// (controller-runtime's config.GetConfig turns it off when QPS is unset).
// Every resource a holder wrote (above epoch 0, listed by the selectable field spec.epoch) is raised: the
// webhook decides writes at the epoch such a resource holds on its copy of the Lease, and the raise is what
// orders them. What a user without the token may add to one is bounded (admission.MaxFreePartBytes), so
// their number, the holder's own, sets the time. The declarations (epoch 0), which anyone may create, are
// listed and raised within half of the time left (the elector's PostAcquireTimeout): those left are
// reported (raiseInTime) and the elector leads. The hook fails, and the elector does not report
// leadership, if any raise failed or a resource a holder wrote was not raised in time.
func FenceOnAcquire(c client.Client) elector.AcquireFence {
	return elector.DeclaredFence(seal.Key{}, func(ctx context.Context, token elector.Token) error {
		bound := fields.OneTermEqualSelector("spec.leaseName", token.Lease.Name)
		list := func(ctx context.Context, epoch fields.Selector) ([]fencingv1alpha1.FencedResource, error) {
			var list fencingv1alpha1.FencedResourceList
			err := c.List(ctx, &list, client.InNamespace(token.Lease.Namespace), client.MatchingFieldsSelector{Selector: fields.AndSelectors(bound, epoch)})
			return list.Items, err
		}
		// The declarations (epoch 0) first, within the budget: anyone may create them. Then the resources a
		// holder wrote (above epoch 0), all of them: the webhook's copy of the Lease may admit a write at
		// the epoch such a resource holds, and only the raise orders it (copyEligible in
		// internal/operator/admission); a declaration is never decided on the copy. In this order a
		// declaration that a write of an earlier term raises between the two Lists is in the second.
		budget, cancel := budgeted(ctx)
		defer cancel()
		declared, derr := list(budget, fields.OneTermEqualSelector("spec.epoch", "0"))
		if derr != nil && budget.Err() == nil {
			return fmt.Errorf("listing the FencedResources declared for lease %s: %w", token.Lease, derr)
		}
		written, err := list(ctx, fields.OneTermNotEqualSelector("spec.epoch", "0"))
		if err != nil {
			return fmt.Errorf("listing the FencedResources written under lease %s: %w", token.Lease, err)
		}
		// A declaration is raised in spec.raisedEpoch, its spec.epoch left at 0, so that it stays in the
		// budgeted List: were it raised in spec.epoch, what anyone declares would become, one acquisition at
		// a time, what every acquisition lists in full. A resource above epoch 0 without data (raised in
		// spec.epoch before spec.raisedEpoch existed, or a holder's data removed) is raised with the
		// declarations, within the budget: the webhook never decides a write to it on its copy (copyEligible).
		written, raisedOnly := splitData(written)
		if err := raiseAll(ctx, len(written), func(ctx context.Context, i int) error { return raise(ctx, c, &written[i], token) }); err != nil {
			return fmt.Errorf("fencing %d FencedResources written under lease %s at epoch %d: %w", len(written), token.Lease, token.Epoch, err)
		}
		if derr != nil {
			klog.FromContext(ctx).Info("Fence-on-acquire did not list the declarations within its budget, half of PostAcquireTimeout; the holder's first write to each raises it",
				"lease", token.Lease.String(), "epoch", token.Epoch, "kind", "FencedResource")
			fenceLeft.WithLabelValues(token.Lease.String(), "FencedResource").Set(-1)
			reportLeft(ctx, c, token, fmt.Sprintf("fence-on-acquire at epoch %d raised the %d FencedResources a holder wrote but could not list the declarations within its budget, "+
				"half of PostAcquireTimeout; they are not fenced at this epoch until the holder's first write to each raises it", token.Epoch, len(written)))
			return ctx.Err()
		}
		raised := make(map[string]bool, len(written))
		for _, fr := range written {
			raised[fr.Name] = true
		}
		declared = append(slices.DeleteFunc(declared, func(fr fencingv1alpha1.FencedResource) bool { return raised[fr.Name] }), raisedOnly...)
		if err := raiseInTime(ctx, budget, c, token, "FencedResource", len(declared), func(ctx context.Context, i int) error { return raiseDeclaration(ctx, c, &declared[i], token) }); err != nil {
			return fmt.Errorf("fencing %d FencedResources declared for lease %s at epoch %d: %w", len(declared), token.Lease, token.Epoch, err)
		}
		return ctx.Err()
	}, protocol.Fences{FencedResources: true})
}

// raiseAll raises n objects a holder wrote, fenceWorkers at a time, every one of them: until they are
// raised, a write of an earlier term at the epoch one of them holds may be admitted on the webhook's copy
// of the Lease. What a user without the token may add to them is bounded (admission.MaxFreePartBytes), so
// their number, the holder's own doing, sets the time. It returns the errors of the raises that failed and,
// if ctx ended first, ctx's error.
func raiseAll(ctx context.Context, n int, raise func(ctx context.Context, i int) error) error {
	errs := make([]error, n+1)
	workqueue.ParallelizeUntil(ctx, fenceWorkers, n, func(i int) { errs[i] = raise(ctx, i) })
	errs[n] = ctx.Err()
	return errors.Join(errs...)
}

// budgeted returns a context that ends once half of the time ctx has left has passed (ctx itself if it
// has no deadline): the budget of the raises of objects no holder wrote.
func budgeted(ctx context.Context) (context.Context, context.CancelFunc) {
	deadline, ok := ctx.Deadline()
	if !ok {
		return context.WithCancel(ctx)
	}
	return context.WithDeadline(ctx, time.Now().Add(time.Until(deadline)/2))
}

// raiseInTime raises n objects no holder wrote, fenceWorkers at a time, until all are raised or budget
// ends: anyone with create RBAC can declare objects, so the time of an acquisition must not grow with how
// many exist. It returns the errors of the raises that failed, joined; an object the budget left unraised
// is not an error.
//
// An object left behind is not raised at this epoch: the operator shows it Fenced=False (BehindLease),
// fencekit_fence_on_acquire_left counts it, and a Warning Event FenceIncomplete on the Lease says how many.
// While it holds no epoch no write is decided on the webhook's copy of the Lease for it, and the holder's
// first write raises it; until then, a write an earlier holder's request had admitted before this
// acquisition may still commit on it, and then the copy, if it lags, may admit that holder's next writes
// too (docs/design/residuals.md).
func raiseInTime(ctx, budget context.Context, c client.Client, token elector.Token, kind string, n int, raise func(ctx context.Context, i int) error) error {
	lease := token.Lease.String()
	left, err := raiseWithin(ctx, budget, n, raise)
	fenceLeft.WithLabelValues(lease, kind).Set(float64(left))
	if left > 0 {
		klog.FromContext(ctx).Info("Fence-on-acquire left objects behind: its budget, half of PostAcquireTimeout, ran out, or their managedFields kept moving where its raise would have made them count as written; the holder's first write to each raises it",
			"lease", lease, "epoch", token.Epoch, "kind", kind, "objects", n, "left", left)
		reportLeft(ctx, c, token, fmt.Sprintf("fence-on-acquire at epoch %d raised %d of %d %s no holder wrote within its budget, half of PostAcquireTimeout "+
			"(or left them where their managedFields kept moving and its raise would have made them count as written); "+
			"the other %d are not fenced at this epoch until the holder's first write to each raises it", token.Epoch, n-left, n, kind, left))
	}
	return err
}

// raiseWithin runs raise for 0..n-1, fenceWorkers at a time, starting none once budget has ended. A raise
// in flight then has until halfway between budget's deadline and ctx's to finish; one cut there may or
// may not have been applied, and counts as left, not as an error: so the caller's deadline is never
// reached by the raises, however slow the apiserver answers. It returns how many were left and the other
// raises' errors, joined.
func raiseWithin(ctx, budget context.Context, n int, raise func(ctx context.Context, i int) error) (left int, err error) {
	finish, cancel := inFlight(ctx, budget)
	defer cancel()
	errs := make([]error, n)
	done := make([]bool, n)
	workqueue.ParallelizeUntil(budget, fenceWorkers, n, func(i int) {
		err := raise(finish, i)
		if err != nil && finish.Err() != nil && ctx.Err() == nil || errors.Is(err, errLeft) {
			return // cut, or left by the raise itself: it counts as left
		}
		errs[i], done[i] = err, true
	})
	for i := range n {
		if !done[i] {
			left++
		}
	}
	return left, errors.Join(errs...)
}

// inFlight is the context of a raise started within budget: it ends halfway between budget's deadline
// and ctx's (with ctx, if either has none).
func inFlight(ctx, budget context.Context) (context.Context, context.CancelFunc) {
	end, ok := ctx.Deadline()
	cut, bok := budget.Deadline()
	if !ok || !bok {
		return context.WithCancel(ctx)
	}
	return context.WithDeadline(ctx, cut.Add(end.Sub(cut)/2))
}

// reportLeft records a Warning Event FenceIncomplete on the Lease: this acquisition left objects unraised.
// Best effort: the Event is for people, the metric and the objects' status say the same.
func reportLeft(ctx context.Context, c client.Client, token elector.Token, note string) {
	ev := &eventsv1.Event{
		ObjectMeta:          metav1.ObjectMeta{Namespace: token.Lease.Namespace, GenerateName: token.Lease.Name + "-"},
		EventTime:           metav1.NowMicro(),
		ReportingController: "fencekit.io/fence-on-acquire", ReportingInstance: token.Holder,
		Action: "FenceOnAcquire", Reason: "FenceIncomplete", Type: corev1.EventTypeWarning,
		Regarding: corev1.ObjectReference{APIVersion: coordinationv1.SchemeGroupVersion.String(), Kind: "Lease",
			Namespace: token.Lease.Namespace, Name: token.Lease.Name},
		Note: note,
	}
	if err := c.Create(ctx, ev); err != nil {
		klog.FromContext(ctx).Error(err, "Recording the FenceIncomplete Event", "lease", token.Lease.String())
	}
}

// FenceOnAcquireForConfig returns FenceOnAcquire's fence with a client of its own, built from a copy of cfg
// (cfg's cluster and credentials) WITHOUT client-side rate limiting. It is the way to fence from a
// rest.Config as rest.InClusterConfig or clientcmd.BuildConfigFromFlags return it, whose QPS limit (5 QPS,
// burst 10 when unset) would hold 100 resources for about 18 s, past the elector's default
// PostAcquireTimeout. The fence is a bounded burst, once per acquisition: 2 + N requests, at most 16 in
// flight; the apiserver's API Priority and Fairness still applies to it. cfg's QPS, Burst and RateLimiter
// are ignored for the fence, and cfg itself is not changed.
func FenceOnAcquireForConfig(cfg *rest.Config) (elector.AcquireFence, error) {
	c, err := fenceClient(cfg)
	if err != nil {
		return elector.AcquireFence{}, err
	}
	return FenceOnAcquire(c), nil
}

// fenceClient is the uncached client of the fence hooks built from a rest.Config: cfg's cluster and
// credentials, fencekit's API in its scheme, no client-side rate limiter. client-go builds a token-bucket
// limiter only when the config has no RateLimiter and its QPS, after 0 is replaced by DefaultQPS, is
// positive ("Setting this to a negative value will disable client-side ratelimiting unless `Ratelimiter`
// is also set": rest.Config.QPS in k8s.io/client-go/rest/config.go, and RESTClientForConfigAndClient
// there), so the copy gets QPS -1 and no RateLimiter, as controller-runtime's config.GetConfig does.
func fenceClient(cfg *rest.Config) (client.Client, error) {
	if cfg == nil {
		return nil, errors.New("building the fence-on-acquire client: no rest.Config given")
	}
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst, cfg.RateLimiter = -1, 0, nil
	return newClient(cfg, "the fence-on-acquire client")
}

// newClient is an uncached client for cfg with fencekit's API in its scheme; what names it in an error.
func newClient(cfg *rest.Config, what string) (client.Client, error) {
	s := runtime.NewScheme()
	if err := fencingv1alpha1.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := eventsv1.AddToScheme(s); err != nil { // fence-on-acquire's FenceIncomplete Event
		return nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: s})
	if err != nil {
		return nil, fmt.Errorf("building %s for %s: %w", what, cfg.Host, err)
	}
	return c, nil
}

// splitData separates the resources a holder wrote (they hold data: only a write with the token sets
// it) from those a raise alone brought above epoch 0.
func splitData(frs []fencingv1alpha1.FencedResource) (written, raisedOnly []fencingv1alpha1.FencedResource) {
	for _, fr := range frs {
		if emptyData(fr.Spec.Data) {
			raisedOnly = append(raisedOnly, fr)
		} else {
			written = append(written, fr)
		}
	}
	return written, raisedOnly
}

// raiseDeclaration raises a declaration (no data, spec.epoch 0) to the token's epoch in spec.raisedEpoch,
// with one JSON merge patch that presents the token, as raise does: from then on the CRD rule refuses a
// write of data below that epoch, and spec.epoch stays 0. A declaration written meanwhile at an earlier
// epoch (the CRD rule then refuses the patch) and a resource above epoch 0 are raised in spec.epoch.
func raiseDeclaration(ctx context.Context, c client.Client, fr *fencingv1alpha1.FencedResource, token elector.Token) error {
	switch {
	case fr.Spec.Epoch != 0 || !emptyData(fr.Spec.Data):
		return raise(ctx, c, fr, token)
	case fr.DeletionTimestamp != nil:
		// Being deleted: no write can give it data any more (admission refuses content on an object being
		// deleted, judged on the object as it is when the write commits), so there is nothing to order;
		// and the raise itself would be refused, failing the acquisition for as long as anyone keeps the
		// declaration with a finalizer.
		return nil
	case fr.Spec.RaisedEpoch == token.Epoch:
		return nil // already fenced at this epoch
	case fr.Spec.RaisedEpoch > token.Epoch:
		return errorf(protocol.ReasonFutureEpoch, fr.Namespace+"/"+fr.Name, fr.Spec.LeaseName, fr.Spec.RaisedEpoch, token.Epoch,
			"FencedResource %s/%s is at epoch %d, above lease %s's new epoch %d (in spec.raisedEpoch): it cannot be fenced at %d (see \"A resource ahead of its Lease\" in fencekit's design)",
			fr.Namespace, fr.Name, fr.Spec.RaisedEpoch, token.Lease, token.Epoch, token.Epoch)
	}
	if err := checkBinding(fr, token); err != nil {
		return err
	}
	err := c.Patch(ctx, fr, raisedEpochPatch(token), client.FieldOwner(token.FieldManager()))
	switch {
	case apierrors.IsNotFound(err):
		return nil // deleted meanwhile: nothing left to fence
	case apierrors.IsInvalid(err):
		// Written, or being deleted, meanwhile: raise what is there now.
		var now fencingv1alpha1.FencedResource
		if gerr := c.Get(ctx, client.ObjectKeyFromObject(fr), &now); gerr != nil {
			return client.IgnoreNotFound(gerr)
		}
		if now.Spec.Epoch != 0 || !emptyData(now.Spec.Data) || now.DeletionTimestamp != nil {
			return raiseDeclaration(ctx, c, &now, token)
		}
	}
	return err
}

// raise sets fr's epoch (and writer) to the token's with one JSON merge patch that presents the token as
// its field manager, leaving data as it is. The patch carries no resourceVersion: the apiserver itself
// refuses it if the resource has moved past the epoch (the CRD rule) or the token is not the Lease's current
// one (the webhook), so a concurrent status update by the operator cannot make it fail with a conflict.
//
// A resource already at the token's epoch is left alone (this acquisition fenced it already). A resource
// *above* it fails the acquisition: it has admitted an epoch the Lease never issued after this one (an
// admin's edit, or a Lease deleted and recreated by hand with a lower epoch), so no holder of this Lease can
// write it, and reporting leadership would hand out a token the resource refuses. docs/design/repair.md says how
// to repair it.
func raise(ctx context.Context, c client.Client, fr *fencingv1alpha1.FencedResource, token elector.Token) error {
	switch {
	case fr.Spec.Epoch == token.Epoch:
		return nil // already fenced at this epoch
	case fr.Spec.Epoch > token.Epoch:
		return errorf(protocol.ReasonFutureEpoch, fr.Namespace+"/"+fr.Name, fr.Spec.LeaseName, fr.Spec.Epoch, token.Epoch,
			"FencedResource %s/%s is at epoch %d, above lease %s's new epoch %d: it cannot be fenced at %d (see \"A resource ahead of its Lease\" in fencekit's design)",
			fr.Namespace, fr.Name, fr.Spec.Epoch, token.Lease, token.Epoch, token.Epoch)
	}
	if err := checkBinding(fr, token); err != nil {
		return err
	}
	// A hold of an earlier term goes with the raise (one of this term is armed only by the holder), and so
	// does a deletion marker (epochPatch removes it).
	err := c.Patch(ctx, fr, epochPatch(token, map[string]any{fencingv1alpha1.HoldAtEpochAnnotation: nil}), client.FieldOwner(token.FieldManager()))
	if apierrors.IsNotFound(err) {
		return nil // deleted meanwhile: nothing left to fence
	}
	return err
}
