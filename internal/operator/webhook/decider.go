package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"sync"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	coordinationlisters "k8s.io/client-go/listers/coordination/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrladmission "sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/fencekit/fencekit/internal/operator/admission"
	"github.com/fencekit/fencekit/pkg/protocol"
)

// decider runs the admission rule (internal/operator/admission) for one webhook: it reads what the rule asks for
// (the webhook's copy of the Lease, a quorum read of it, the Namespace) and reports refusals. It decides
// nothing itself.
type decider struct {
	webhook string // webhookFencedResources or webhookObjects
	// reader reads Leases and Namespaces straight from the apiserver (quorum reads): an acquisition that
	// completed a moment ago is always seen.
	reader   ctrl.Reader
	leases   *LeaseCache
	recorder events.EventRecorder
	clock    clock.PassiveClock
	// renewals times the holders' renewals as this webhook reads them.
	renewals *renewals
	// namespaces reads whether the namespace of a write that presents a token is terminating; nil: reader.
	// A cache may lag the namespace's deletion by its watch's delay (docs/design/residuals.md); the
	// namespace controller's deletes always read the apiserver.
	namespaces ctrl.Reader
	// operator is the user fencekit's operator writes as ("" if unknown): its requests are marked
	// admission.User.Operator.
	operator string
	// racing records the writes presenting a token being decided, for admission.Request.Racing.
	racing *racing
}

// Option configures a webhook.
type Option func(*decider)

// WithClock sets the clock used to judge Lease expiry (default: the real clock). A LeaseCache times the
// renewals its watch delivers on the real clock.
func WithClock(c clock.PassiveClock) Option { return func(d *decider) { d.clock = c } }

// WithEventRecorder records a Warning Event on the written object for every refused write (not for dry
// runs): on the FencedResource, or on the object a FencingPolicy declares.
func WithEventRecorder(r events.EventRecorder) Option { return func(d *decider) { d.recorder = r } }

// WithNamespaceCache reads, from c (the manager's cache), whether the namespace of a write that presents
// a token is being deleted, instead of a read from the apiserver per write.
func WithNamespaceCache(c ctrl.Reader) Option { return func(d *decider) { d.namespaces = c } }

// WithOperatorUser names the user fencekit's operator writes as, whose status writes on FencedResources
// have their allowance (admission.MaxOperatorPartBytes).
func WithOperatorUser(name string) Option { return func(d *decider) { d.operator = name } }

// WithLeaseCache lets the webhooks admit, on the copy c, what the rule lets a copy admit (see LeaseCache).
func WithLeaseCache(c *LeaseCache) Option { return func(d *decider) { d.leases = c } }

func newDecider(webhook string, reader ctrl.Reader, opts []Option) decider {
	d := decider{webhook: webhook, reader: reader, clock: clock.RealClock{}, renewals: &renewals{}}
	for _, o := range opts {
		o(&d)
	}
	if d.leases != nil {
		d.renewals = d.leases.renewals // the watch's timing of the renewals, shared by the webhooks
	}
	d.racing = newRacing(d.clock)
	return d
}

// decide returns the rule's verdict on r, reading the Lease only if the rule needs it: first the copy,
// where the rule allows it, then a quorum read.
func (d *decider) decide(ctx context.Context, r *admission.Request) (v admission.Verdict, err error) {
	r.User.Operator = d.operator != "" && r.User.Name == d.operator
	now := d.clock.Now()
	if !admission.PresentsToken(r) {
		r.Racing = d.racing.epoch(r)
	} else if d.leases.Synced() {
		// Only a write that may commit holds back the free writes, as the copy shows the Lease (a copy
		// that lags an acquisition by a moment records no write of the new holder's for that moment).
		if l := d.leases.Lease(r.Namespace, r.LeaseName); l != nil && admission.HoldsBackFreeWrites(r, d.renewals.parse(l, admission.Copy, now), now) {
			done := d.racing.begin(r)
			defer func() { done(err == nil && v.Admitted()) }()
		}
	}
	if admission.ReadsNamespace(r) {
		from := d.reader
		if d.namespaces != nil && r.Operation != admission.Delete {
			from = d.namespaces
		}
		terminating, err := namespaceTerminating(ctx, from, r.Namespace)
		if err != nil {
			return admission.Verdict{}, err
		}
		r.NamespaceTerminating = terminating
	}
	v = admission.Decide(r, nil, now)
	if v.Need == admission.NeedLease && d.leases.Synced() {
		if l := d.leases.Lease(r.Namespace, r.LeaseName); l != nil {
			if cv := admission.Decide(r, d.renewals.parse(l, admission.Copy, now), now); cv.Admitted() {
				leaseReads.WithLabelValues(d.webhook, sourceCache).Inc()
				return cv, nil
			}
		}
	}
	if v.Need == admission.Decided {
		return v, nil
	}
	leaseReads.WithLabelValues(d.webhook, sourceAPIServer).Inc()
	lease, err := d.lease(ctx, r.Namespace, r.LeaseName)
	if err != nil {
		return admission.Verdict{}, err
	}
	return admission.Decide(r, d.renewals.parse(lease, admission.Quorum, now), now), nil
}

// respond turns the verdict on r into the admission response, reporting a refusal.
func (d *decider) respond(ctx context.Context, req ctrladmission.Request, r *admission.Request, v admission.Verdict, err error) ctrladmission.Response {
	if err != nil {
		return statusResponse(err)
	}
	if v.Err == nil {
		return ctrladmission.Allowed("")
	}
	if v.Moment {
		heldBack.WithLabelValues(d.webhook, req.Namespace, r.LeaseName).Inc()
		return statusResponse(v.Err.StatusError())
	}
	report(ctx, d.recorder, req, refusal{webhook: d.webhook, regarding: regarding(req, r), object: objectRef(r),
		policy: r.Policy, lease: r.LeaseName, err: v.Err})
	return statusResponse(v.Err.StatusError())
}

// lease reads Lease namespace/name straight from the apiserver, nil if it does not exist. Any other error
// fails the admission: fencekit cannot prove the write is fenced (fail closed).
func (d *decider) lease(ctx context.Context, namespace, name string) (*coordinationv1.Lease, error) {
	var lease coordinationv1.Lease
	err := d.reader.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, &lease)
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, apierrors.NewServiceUnavailable(fmt.Sprintf("reading lease %s/%s to fence a write: %v", namespace, name, err))
	}
	return &lease, nil
}

// namespaceTerminating reads from r whether namespace name is being deleted.
func namespaceTerminating(ctx context.Context, r ctrl.Reader, name string) (bool, error) {
	var ns corev1.Namespace
	err := r.Get(ctx, types.NamespacedName{Name: name}, &ns)
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, apierrors.NewServiceUnavailable(fmt.Sprintf("reading namespace %s to decide a write in it: %v", name, err))
	}
	return ns.DeletionTimestamp != nil || ns.Status.Phase == corev1.NamespaceTerminating, nil
}

// decodeRequest decodes the parts of req every rule needs: the user, the field manager, the operation,
// the stored and the resulting object, and the object's name (from the stored object in a
// deletecollection, where the request names none); and reads what the rule compares off them
// (admission.Request.Complete).
func decodeRequest(req ctrladmission.Request, class admission.Class) (*admission.Request, error) {
	r := &admission.Request{Class: class, Operation: admission.Operation(req.Operation), Subresource: req.SubResource,
		User: admission.User{Name: req.UserInfo.Username, Groups: req.UserInfo.Groups}, Kind: req.Kind.Kind,
		Namespace: req.Namespace, Name: req.Name, DryRun: req.DryRun != nil && *req.DryRun}
	decode := func(raw []byte) (*unstructured.Unstructured, error) {
		if len(raw) == 0 {
			return nil, nil
		}
		m, err := decodeObject(raw, class == admission.FencedResource)
		if err != nil || m == nil {
			// Not the error itself: the JSON decoders quote the object, up to megabytes.
			return nil, fmt.Errorf("decoding %s %s/%s: the request's object (%d bytes) is not a JSON object", r.Kind, r.Namespace, r.Name, len(raw))
		}
		return &unstructured.Unstructured{Object: m}, nil
	}
	var err error
	if r.Old, err = decode(req.OldObject.Raw); err != nil {
		return nil, err
	}
	if r.New, err = decode(req.Object.Raw); err != nil {
		return nil, err
	}
	if r.Name == "" {
		switch {
		case r.Old != nil && r.Old.GetName() != "":
			r.Name = r.Old.GetName()
		case r.New != nil && r.New.GetName() != "":
			r.Name = r.New.GetName()
		case r.New != nil:
			r.Name = r.New.GetGenerateName() + "*" // a create with generateName
		}
	}
	r.OldBytes, r.NewBytes = len(req.OldObject.Raw), len(req.Object.Raw)
	if r.FieldManager, r.DeletePrecondition, r.DeleteOptions, err = requestOptions(req); err != nil {
		return nil, fmt.Errorf("%s %s/%s: %w", r.Kind, r.Namespace, r.Name, err)
	}
	r.Complete()
	return r, nil
}

// decodeObject decodes an object as unstructured reads it (numbers as int64 where they fit). With rawData,
// a FencedResource's spec.data is kept as its JSON (a json.RawMessage): the rule compares it only as a
// whole, and only for a write without the token, so the holder's writes are not slowed by decoding data
// of up to 256 KiB twice.
func decodeObject(raw []byte, rawData bool) (map[string]any, error) {
	var m map[string]any
	if !rawData {
		err := utiljson.Unmarshal(raw, &m)
		return m, err
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil {
		return nil, err
	}
	specRaw, hasSpec := top["spec"]
	var spec map[string]json.RawMessage
	if hasSpec {
		if err := json.Unmarshal(specRaw, &spec); err != nil {
			return nil, err
		}
	}
	m, err := decodeFields(top, "spec")
	if err != nil || !hasSpec {
		return m, err
	}
	sm, err := decodeFields(spec, "data")
	if err != nil {
		return nil, err
	}
	if d, ok := spec["data"]; ok {
		sm["data"] = d
	}
	m["spec"] = sm
	return m, nil
}

// decodeFields decodes each field of fields as unstructured reads it, all but the one named skip.
func decodeFields(fields map[string]json.RawMessage, skip string) (map[string]any, error) {
	m := make(map[string]any, len(fields))
	for k, v := range fields {
		if k == skip {
			continue
		}
		var x any
		if err := utiljson.Unmarshal(v, &x); err != nil {
			return nil, err
		}
		m[k] = x
	}
	return m, nil
}

// requestOptions reads the request's options: the field manager, where a fenced write presents its token
// (CreateOptions, UpdateOptions, PatchOptions; admission sees a PATCH as UPDATE), and a DELETE's
// precondition resourceVersion and the options that decide what it does (DeleteOptions).
func requestOptions(req ctrladmission.Request) (fieldManager, precondition string, del admission.DeleteOptions, err error) {
	if len(req.Options.Raw) == 0 {
		return "", "", del, nil
	}
	var opts struct {
		FieldManager  string `json:"fieldManager"`
		Preconditions *struct {
			ResourceVersion *string `json:"resourceVersion"`
		} `json:"preconditions"`
		OrphanDependents   *bool   `json:"orphanDependents"`
		PropagationPolicy  *string `json:"propagationPolicy"`
		GracePeriodSeconds *int64  `json:"gracePeriodSeconds"`
	}
	if err := json.Unmarshal(req.Options.Raw, &opts); err != nil {
		return "", "", del, fmt.Errorf("decoding the request's options: %w", err)
	}
	if req.Operation == admissionv1.Delete {
		if opts.Preconditions != nil && opts.Preconditions.ResourceVersion != nil {
			precondition = *opts.Preconditions.ResourceVersion
		}
		kind := req.Kind
		if req.RequestKind != nil {
			kind = *req.RequestKind // the version the DELETE was sent at decides the resource's default
		}
		del = admission.DeleteOptions{OrphanDependents: opts.OrphanDependents, PropagationPolicy: opts.PropagationPolicy,
			GracePeriodSeconds: opts.GracePeriodSeconds, DefaultOrphans: admission.DefaultOrphans(kind.Group, kind.Version, kind.Kind)}
		return "", precondition, del, nil
	}
	return opts.FieldManager, "", del, nil
}

func badRequest(err error) ctrladmission.Response {
	return ctrladmission.Errored(http.StatusBadRequest, err)
}

func statusResponse(err error) ctrladmission.Response {
	var status *apierrors.StatusError
	// Only an error that is itself an API status passes through; a wrapped one carries context its message keeps.
	if s, ok := err.(*apierrors.StatusError); ok { //nolint:errorlint // exact type on purpose (above)
		status = s
	} else {
		status = apierrors.NewInternalError(err)
	}
	resp := ctrladmission.Denied(status.ErrStatus.Message)
	resp.Result = &status.ErrStatus
	return resp
}

// LeaseCache is the webhooks' watch-fed copy of the fenced Leases (label fencing.fencekit.io/fenced=true).
// The admission rule may let it *admit* a write, and only one that fence-on-acquire makes safe to decide
// from a copy that lags (internal/operator/admission, copyEligible and copyMayAdmit). Every other decision, and
// every refusal, is made on a quorum read of the Lease.
// The reason a lagging copy is safe there is written once, at copyEligible; docs/design/lease-reads.md and
// docs/design/residuals.md say what the copy does not cover.
type LeaseCache struct {
	informer cache.SharedIndexInformer
	lister   coordinationlisters.LeaseLister
	// renewals times each renewal from when the watch delivered it, for every webhook that shares this
	// copy (core.Lease.ObservedRenewal): a webhook that reads a Lease rarely would otherwise date a
	// renewal from its own next read.
	renewals *renewals
}

// NewLeaseCache returns a LeaseCache that lists and watches the fenced Leases of every namespace with cs;
// add it to the manager (it runs on every replica, as the webhooks do).
func NewLeaseCache(cs kubernetes.Interface) *LeaseCache {
	f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.LabelSelector = protocol.FencedLabel + "=true"
	}))
	leases := f.Coordination().V1().Leases()
	c := &LeaseCache{informer: leases.Informer(), lister: leases.Lister(), renewals: &renewals{}}
	observe := func(obj any) {
		if l, ok := obj.(*coordinationv1.Lease); ok {
			c.renewals.observe(l, time.Now())
		}
	}
	// Registering a handler on an informer that has not started cannot fail.
	_, _ = c.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: observe, UpdateFunc: func(_, obj any) { observe(obj) }})
	return c
}

var _ manager.LeaderElectionRunnable = (*LeaseCache)(nil)

// Start runs the informer until ctx ends.
func (c *LeaseCache) Start(ctx context.Context) error {
	c.informer.Run(ctx.Done())
	return nil
}

// NeedLeaderElection is false: every replica serves the webhooks.
func (c *LeaseCache) NeedLeaderElection() bool { return false }

// Lease returns the copy of Lease namespace/name as it stands (nil if the copy has none); do not modify it.
func (c *LeaseCache) Lease(namespace, name string) *coordinationv1.Lease {
	l, err := c.lister.Leases(namespace).Get(name)
	if err != nil {
		return nil
	}
	return l
}

// Synced reports whether the copy has listed the Leases once (false for a nil LeaseCache: no copy).
func (c *LeaseCache) Synced() bool { return c != nil && c.informer.HasSynced() }

// racingAfterAdmission is how long a write presenting a token that this webhook admitted still refuses
// the writes without the token that read the same stored object: the apiserver commits it a moment after
// admission, and a write without the token decided in that moment would commit first. Once the write
// commits, the object's resourceVersion changes and the record matches nothing.
const racingAfterAdmission = time.Second

// maxRacing is how many records the webhook keeps before it sweeps the expired ones.
const maxRacing = 4096

// racing records the writes presenting a token that this webhook is deciding, or admitted a moment ago,
// by the stored object they read (UID and resourceVersion), for the rule's Request.Racing: the apiserver
// decides a patch again after every conflict (the write carries no resourceVersion), and a write without
// the token, decided without the Lease, is quicker to decide than one presenting it; under a storm of
// them the token's write would lose every round until its timeout. A record refuses only writes without
// the token that read the very same object, so it costs nothing once the token's write committed. It
// lives in one webhook replica: a write decided by another replica is not seen (docs/design/residuals.md).
type racing struct {
	clock clock.PassiveClock
	mu    sync.Mutex
	m     map[racingKey]*racingWrite
}

type racingKey struct {
	uid types.UID
	rv  string
}

type racingWrite struct {
	epoch   int64     // the highest epoch presented
	pending int       // decisions under way
	until   time.Time // admitted: refuses until then
}

func newRacing(c clock.PassiveClock) *racing {
	return &racing{clock: c, m: map[racingKey]*racingWrite{}}
}

// racingKeyOf is the stored object r read, if r is an update of one.
func racingKeyOf(r *admission.Request) (racingKey, bool) {
	if r.Operation != admission.Update || r.Old == nil || r.Old.GetUID() == "" || r.Old.GetResourceVersion() == "" {
		return racingKey{}, false
	}
	return racingKey{uid: r.Old.GetUID(), rv: r.Old.GetResourceVersion()}, true
}

// begin records that r, which presents a token, is being decided; the returned func ends the record with
// the verdict. It returns a no-op for a request it does not track.
func (rc *racing) begin(r *admission.Request) func(admitted bool) {
	epoch, ok := r.Token()
	key, tracked := racingKeyOf(r)
	if !ok || !tracked {
		return func(bool) {}
	}
	rc.mu.Lock()
	if len(rc.m) >= maxRacing {
		rc.sweepLocked()
	}
	w := rc.m[key]
	if w == nil {
		w = &racingWrite{}
		rc.m[key] = w
	}
	w.pending++
	w.epoch = max(w.epoch, epoch)
	rc.mu.Unlock()
	return func(admitted bool) {
		rc.mu.Lock()
		defer rc.mu.Unlock()
		w.pending--
		if admitted && changes(r.Old, r.New) {
			w.until = rc.clock.Now().Add(racingAfterAdmission)
		}
		if w.pending == 0 && !rc.clock.Now().Before(w.until) && rc.m[key] == w {
			delete(rc.m, key)
		}
	}
}

// epoch returns the epoch of a write presenting a token recorded on the stored object r read, 0 if none.
func (rc *racing) epoch(r *admission.Request) int64 {
	key, tracked := racingKeyOf(r)
	if !tracked {
		return 0
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	w := rc.m[key]
	if w == nil || w.pending == 0 && !rc.clock.Now().Before(w.until) {
		return 0
	}
	return w.epoch
}

func (rc *racing) sweepLocked() {
	now := rc.clock.Now()
	for k, w := range rc.m {
		if w.pending == 0 && !now.Before(w.until) {
			delete(rc.m, k)
		}
	}
}

// changes reports whether a write turns old into updated other than in managedFields: the apiserver
// commits no write that changes nothing, and the resourceVersion stays.
func changes(old, updated *unstructured.Unstructured) bool {
	if old == nil || updated == nil {
		return true
	}
	return !equality.Semantic.DeepEqual(withoutManagedFields(old.Object), withoutManagedFields(updated.Object))
}

// withoutManagedFields is a shallow copy of o without metadata.managedFields (o's values may be raw JSON,
// which a deep copy of unstructured content refuses).
func withoutManagedFields(o map[string]any) map[string]any {
	c := maps.Clone(o)
	if meta, ok := o["metadata"].(map[string]any); ok {
		meta = maps.Clone(meta)
		delete(meta, "managedFields")
		c["metadata"] = meta
	}
	return c
}
