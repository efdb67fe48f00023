package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime/pkg/client"
	ctrladmission "sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/fencekit/fencekit/internal/operator/admission"
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
