package controllers

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/internal/operator/admission"
	"github.com/fencekit/fencekit/pkg/protocol"
)

// +kubebuilder:rbac:groups=fencing.fencekit.io,resources=fencingpolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups=fencing.fencekit.io,resources=fencingpolicies/status,verbs=get;update
// The reconciler watches webhook configurations (list and watch cannot be restricted to names), reads the
// one whose address it copies and updates its own, which the Helm chart creates (so that the operator needs
// no right to create webhook configurations); the names below are config/'s, the chart grants its own.
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=validatingwebhookconfigurations,verbs=list;watch
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=validatingwebhookconfigurations,verbs=get;update,resourceNames=fencekit-objects;validating-webhook-configuration

// syncKey is the request that rebuilds the webhook configuration without updating a policy's status.
var syncKey = reconcile.Request{}

// FencingPolicyReconciler keeps the object webhook's configuration in step with the FencingPolicies: one
// webhook per namespace that has policies, matching exactly the declared resources (and all their
// subresources) there, failurePolicy Fail. It also reports each policy's state in its status.
type FencingPolicyReconciler struct {
	client client.Client
	// reader reads the Lease from the apiserver for status.coverageEpoch (mgr.GetAPIReader()): a cached
	// epoch could be below the epoch at which a changed policy took effect.
	reader client.Reader
	// configName is the ValidatingWebhookConfiguration this reconciler owns; sourceName the one that
	// serves FencedResources, whose client configuration (service or URL, CA) it copies, with path.
	configName, sourceName, path string
	// leasesPath is where the Lease webhook serves (LeaseWebhook).
	leasesPath string
	// aliases are the resources whose writes stand for a subresource of a declared one (core bindings for
	// pods/binding): the webhooks match them too.
	aliases admission.Aliases

	// synced is what the webhook configuration was last found or made right for (webhookInputs): every
	// policy reconcile rebuilds the configuration, and one whose inputs have not changed since is skipped
	// instead of compared webhook by webhook, so that an operator start, which reconciles every policy, costs
	// the policies once each, not once per policy.
	mu     sync.Mutex
	synced string
}

var _ reconcile.Reconciler = (*FencingPolicyReconciler)(nil)

// NewFencingPolicyReconciler returns a reconciler that writes the ValidatingWebhookConfiguration
// configName, pointing its webhooks at path on the server that sourceName's webhooks call; each webhook
// matches the declared resources, their subresources and their aliases (admission.AliasesFrom).
func NewFencingPolicyReconciler(c client.Client, configName, sourceName, path, leasesPath string, aliases admission.Aliases) *FencingPolicyReconciler {
	return &FencingPolicyReconciler{client: c, configName: configName, sourceName: sourceName, path: path, leasesPath: leasesPath, aliases: aliases}
}

// SetupWithManager registers the reconciler.
func (r *FencingPolicyReconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.reader = mgr.GetAPIReader()
	named := func(name string) predicate.Predicate {
		return predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetName() == name })
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&fencingv1alpha1.FencingPolicy{}).
		Watches(&coordinationv1.Lease{}, handler.EnqueueRequestsFromMapFunc(r.policiesOf), builder.WithPredicates(leaseChanges)).
		Watches(&admissionregistrationv1.ValidatingWebhookConfiguration{},
			handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request { return []reconcile.Request{syncKey} }),
			builder.WithPredicates(predicate.Or(named(r.configName), named(r.sourceName)))).
		Named("fencingpolicy").
		Complete(r)
}

func (r *FencingPolicyReconciler) policiesOf(ctx context.Context, lease client.Object) []reconcile.Request {
	var list fencingv1alpha1.FencingPolicyList
	if err := r.client.List(ctx, &list, client.InNamespace(lease.GetNamespace())); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing FencingPolicies", "lease", klog.KObj(lease))
		return nil
	}
	var reqs []reconcile.Request
	for _, p := range list.Items {
		if p.Spec.LeaseName == lease.GetName() {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&p)})
		}
	}
	return reqs
}

// Reconcile rebuilds the webhook configuration from every policy, then reports the policy's state.
func (r *FencingPolicyReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	syncErr := r.syncWebhooks(ctx)
	if req == syncKey {
		return reconcile.Result{}, syncErr
	}
	var p fencingv1alpha1.FencingPolicy
	if err := r.client.Get(ctx, req.NamespacedName, &p); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if p.DeletionTimestamp != nil {
		return reconcile.Result{}, syncErr
	}
	if err := r.updateStatus(ctx, &p, syncErr); err != nil {
		return reconcile.Result{}, err
	}
	return reconcile.Result{}, syncErr
}

func (r *FencingPolicyReconciler) updateStatus(ctx context.Context, p *fencingv1alpha1.FencingPolicy, syncErr error) error {
	want := p.Status.DeepCopy()
	want.ObservedGeneration = p.Generation
	cond := metav1.Condition{Type: fencingv1alpha1.ConditionReady, ObservedGeneration: p.Generation}
	var lease coordinationv1.Lease
	leaseErr := r.client.Get(ctx, types.NamespacedName{Namespace: p.Namespace, Name: p.Spec.LeaseName}, &lease)
	switch {
	case syncErr != nil:
		cond.Status, cond.Reason = metav1.ConditionFalse, fencingv1alpha1.ReasonWebhookNotConfigured
		cond.Message = fmt.Sprintf("the objects are not fenced yet: writing ValidatingWebhookConfiguration %s failed: %v", r.configName, syncErr)
	case apierrors.IsNotFound(leaseErr):
		want.LeaseEpoch = 0
		cond.Status, cond.Reason = metav1.ConditionFalse, fencingv1alpha1.ReasonPolicyLeaseNotFound
		cond.Message = fmt.Sprintf("lease %s does not exist: every write of the declared objects is refused until an elector holds it", p.Spec.LeaseName)
	case leaseErr != nil:
		return leaseErr
	default:
		want.LeaseEpoch = admission.ParseLease(&lease, admission.Quorum).Epoch
		cond.Status, cond.Reason = metav1.ConditionTrue, fencingv1alpha1.ReasonEnforced
		cond.Message = fmt.Sprintf("only the holder of lease %s may write %s in namespace %s (webhook %s of %s)",
			p.Spec.LeaseName, describe(p.Spec.Resources), p.Namespace, webhookName(p.Namespace), r.configName)
	}
	if want.CoverageGeneration != p.Generation {
		epoch, known, err := r.quorumEpoch(ctx, p)
		if err != nil {
			return err
		}
		if known { // otherwise the coverage stays unrecorded (quorum reads) until the Lease's next change
			// Never lower: the webhook refuses it (a higher coverage epoch only sends more writes to a quorum read).
			want.CoverageGeneration, want.CoverageEpoch = p.Generation, max(epoch, p.Status.CoverageEpoch)
		}
	}
	meta.SetStatusCondition(&want.Conditions, cond)
	refused := metav1.Condition{Type: fencingv1alpha1.ConditionControllersRefused, Status: metav1.ConditionFalse,
		Reason: fencingv1alpha1.ReasonNoControllerRefused, ObservedGeneration: p.Generation,
		Message: "no declared resource is written by a cluster controller that fencekit refuses"}
	if warnings := admission.RefusedControllers(p); len(warnings) > 0 {
		refused.Status, refused.Reason, refused.Message = metav1.ConditionTrue, fencingv1alpha1.ReasonRefusesControllers, strings.Join(warnings, "; ")
	}
	meta.SetStatusCondition(&want.Conditions, refused)
	if equality.Semantic.DeepEqual(want, &p.Status) {
		return nil
	}
	p.Status = *want
	if err := r.client.Status().Update(ctx, p); err != nil {
		return fmt.Errorf("updating FencingPolicy status: %w", err)
	}
	return nil
}

// quorumEpoch reads p's Lease from the apiserver, after p's generation was observed, and returns its
// coverage epoch (coverageEpoch): every acquisition above it comes after p's spec, so its fence-on-acquire
// listed what p declares.
func (r *FencingPolicyReconciler) quorumEpoch(ctx context.Context, p *fencingv1alpha1.FencingPolicy) (epoch int64, known bool, err error) {
	if r.reader == nil {
		return 0, false, errors.New("the FencingPolicy reconciler has no API reader: call SetupWithManager")
	}
	var lease coordinationv1.Lease
	err = r.reader.Get(ctx, types.NamespacedName{Namespace: p.Namespace, Name: p.Spec.LeaseName}, &lease)
	switch {
	case apierrors.IsNotFound(err):
		epoch, known = coverageEpoch(nil)
		return epoch, known, nil
	case err != nil:
		return 0, false, fmt.Errorf("reading lease %s/%s for FencingPolicy %s's coverage: %w", p.Namespace, p.Spec.LeaseName, p.Name, err)
	}
	epoch, known = coverageEpoch(&lease)
	return epoch, known, nil
}

// coverageEpoch is the coverage epoch a policy's generation gets from its Lease as read now: 0 if the Lease
// does not exist or carries no epoch (every later acquisition is above 0), its epoch otherwise. A
// malformed epoch annotation (one a user wrote by hand) says nothing of the epochs held before or after:
// known is false, and the coverage stays unrecorded until the Lease changes again.
func coverageEpoch(lease *coordinationv1.Lease) (epoch int64, known bool) {
	if lease == nil {
		return 0, true
	}
	if _, set := lease.Annotations[protocol.EpochAnnotation]; !set {
		return 0, true
	}
	l := admission.ParseLease(lease, admission.Quorum)
	return l.Epoch, l.EpochErr == ""
}

func describe(entries []fencingv1alpha1.FencedObjects) string {
	var s string
	for i, e := range entries {
		if i > 0 {
			s += ", "
		}
		s += e.Resource
		if e.Group != "" {
			s += "." + e.Group
		}
		if e.Selector != nil {
			s += " (" + metav1.FormatLabelSelector(e.Selector) + ")"
		}
	}
	return s
}

func webhookName(namespace string) string { return namespace + ".objects.fencing.fencekit.io" }

// LeaseWebhook is the webhook of the fenced Leases (labelled fencing.fencekit.io/fenced=true, before or
// after the write), at clientConfig: it is sent every create and update of one except those that acquire,
// renew or release it (the Lease policy's "guarded" writes, admission's termWrite) and those of the
// break-glass groups, so that an elector's renewals never wait for it. Its match conditions are the
// rule's: the rule decides the same writes again.
func LeaseWebhook(clientConfig admissionregistrationv1.WebhookClientConfig) admissionregistrationv1.ValidatingWebhook {
	const (
		epoch       = "object.metadata.?annotations[?'fencing.fencekit.io/epoch'].orValue('')"
		oldEpoch    = "oldObject.metadata.?annotations[?'fencing.fencekit.io/epoch'].orValue('')"
		acquirer    = "object.metadata.?annotations[?'fencing.fencekit.io/acquirer'].orValue('')"
		oldAcquirer = "oldObject.metadata.?annotations[?'fencing.fencekit.io/acquirer'].orValue('')"
		oldFenced   = "oldObject.metadata.?labels[?'fencing.fencekit.io/fenced'].orValue('') == 'true'"
	)
	return admissionregistrationv1.ValidatingWebhook{
		Name:         leaseWebhookName,
		ClientConfig: clientConfig,
		Rules: []admissionregistrationv1.RuleWithOperations{{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
			Rule: admissionregistrationv1.Rule{APIGroups: []string{"coordination.k8s.io"}, APIVersions: []string{"*"}, Resources: []string{"leases"},
				Scope: ptr.To(admissionregistrationv1.NamespacedScope)},
		}},
		MatchConditions: []admissionregistrationv1.MatchCondition{
			{Name: "not-break-glass", Expression: "!request.userInfo.groups.exists(g, g == 'system:masters' || g == 'fencekit:breakglass')"},
			{Name: "neither-acquires-renews-nor-releases", Expression: epoch + " == '' || (oldObject != null && " + oldFenced + " && " +
				epoch + " == " + oldEpoch + " && " + acquirer + " == " + oldAcquirer + " && object.?spec.orValue({}) == oldObject.?spec.orValue({}))"},
		},
		FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
		MatchPolicy:             ptr.To(admissionregistrationv1.Equivalent),
		NamespaceSelector:       &metav1.LabelSelector{},
		ObjectSelector:          &metav1.LabelSelector{MatchLabels: map[string]string{"fencing.fencekit.io/fenced": "true"}},
		SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
		TimeoutSeconds:          ptr.To(int32(5)),
		AdmissionReviewVersions: []string{"v1"},
	}
}

// leaseWebhookName names the Lease webhook; no namespace's webhook (webhookName) can take it.
const leaseWebhookName = "leases.fencing.fencekit.io"

// syncWebhooks writes the configuration: for each namespace with policies, one webhook whose
// namespaceSelector is that namespace alone and whose rules are exactly the declared resources with all
// their subresources, for CREATE, UPDATE and DELETE.
func (r *FencingPolicyReconciler) syncWebhooks(ctx context.Context) error {
	var source admissionregistrationv1.ValidatingWebhookConfiguration
	if err := r.client.Get(ctx, types.NamespacedName{Name: r.sourceName}, &source); err != nil {
		return fmt.Errorf("reading ValidatingWebhookConfiguration %s for the webhook's address: %w", r.sourceName, err)
	}
	if len(source.Webhooks) == 0 {
		return fmt.Errorf("ValidatingWebhookConfiguration %s has no webhook to copy the address from", r.sourceName)
	}
	clientConfig, err := withPath(source.Webhooks[0].ClientConfig, r.path)
	if err != nil {
		return err
	}
	leasesConfig, err := withPath(source.Webhooks[0].ClientConfig, r.leasesPath)
	if err != nil {
		return err
	}
	// The cached policies are only read here: no copy of them is needed.
	var list fencingv1alpha1.FencingPolicyList
	if err := r.client.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
		return fmt.Errorf("listing FencingPolicies: %w", err)
	}
	var cfg admissionregistrationv1.ValidatingWebhookConfiguration
	err = r.client.Get(ctx, types.NamespacedName{Name: r.configName}, &cfg)
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("reading ValidatingWebhookConfiguration %s: %w", r.configName, err)
	}
	exists := err == nil
	if exists && r.upToDate(webhookInputs(&source, &cfg, list.Items)) {
		return nil
	}
	byNamespace := map[string]map[string][]string{} // namespace -> group -> resources
	for _, p := range list.Items {
		// kube-system is never fenced (the policy webhook refuses such policies; this guards against one
		// created while it was bypassed).
		if p.DeletionTimestamp != nil || p.Namespace == "kube-system" {
			continue
		}
		groups := byNamespace[p.Namespace]
		if groups == nil {
			groups = map[string][]string{}
			byNamespace[p.Namespace] = groups
		}
		for _, e := range p.Spec.Resources {
			routes := append([]string{e.Resource, e.Resource + "/*"}, r.aliases.Of(schema.GroupResource{Group: e.Group, Resource: e.Resource})...)
			for _, res := range routes {
				if !slices.Contains(groups[e.Group], res) {
					groups[e.Group] = append(groups[e.Group], res)
				}
			}
		}
	}
	namespaces := make([]string, 0, len(byNamespace))
	for ns := range byNamespace {
		namespaces = append(namespaces, ns)
	}
	sort.Strings(namespaces)
	webhooks := make([]admissionregistrationv1.ValidatingWebhook, 0, len(namespaces)+1)
	for _, ns := range namespaces {
		groups := byNamespace[ns]
		names := make([]string, 0, len(groups))
		for g := range groups {
			names = append(names, g)
		}
		sort.Strings(names)
		var rules []admissionregistrationv1.RuleWithOperations
		for _, g := range names {
			resources := groups[g]
			sort.Strings(resources)
			rules = append(rules, admissionregistrationv1.RuleWithOperations{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update, admissionregistrationv1.Delete},
				Rule: admissionregistrationv1.Rule{
					APIGroups: []string{g}, APIVersions: []string{"*"}, Resources: resources,
					Scope: ptr.To(admissionregistrationv1.NamespacedScope),
				},
			})
		}
		webhooks = append(webhooks, admissionregistrationv1.ValidatingWebhook{
			Name:                    webhookName(ns),
			ClientConfig:            clientConfig,
			Rules:                   rules,
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			MatchPolicy:             ptr.To(admissionregistrationv1.Equivalent),
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}},
			ObjectSelector:          &metav1.LabelSelector{},
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			TimeoutSeconds:          ptr.To(int32(5)),
			AdmissionReviewVersions: []string{"v1"},
		})
	}
	webhooks = append(webhooks, LeaseWebhook(leasesConfig))
	if !exists {
		cfg = admissionregistrationv1.ValidatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: r.configName, Labels: map[string]string{"app.kubernetes.io/managed-by": "fencekit"}},
			Webhooks:   webhooks,
		}
		if err := r.client.Create(ctx, &cfg); err != nil {
			return fmt.Errorf("creating ValidatingWebhookConfiguration %s: %w", r.configName, err)
		}
	} else if !equality.Semantic.DeepEqual(cfg.Webhooks, webhooks) {
		cfg.Webhooks = webhooks
		if err := r.client.Update(ctx, &cfg); err != nil {
			return fmt.Errorf("updating ValidatingWebhookConfiguration %s: %w", r.configName, err)
		}
	}
	r.recordSynced(webhookInputs(&source, &cfg, list.Items))
	return nil
}

// webhookInputs names what the webhook configuration is built from, as of one reading: the source
// configuration's and the configuration's own resourceVersions (a change by anyone else makes them differ)
// and each policy's identity, generation (its spec) and deletion.
func webhookInputs(source, cfg *admissionregistrationv1.ValidatingWebhookConfiguration, policies []fencingv1alpha1.FencingPolicy) string {
	keys := make([]string, 0, len(policies))
	for _, p := range policies {
		keys = append(keys, fmt.Sprintf("%s/%s/%s/%d/%t", p.Namespace, p.Name, p.UID, p.Generation, p.DeletionTimestamp != nil))
	}
	sort.Strings(keys)
	return source.ResourceVersion + "|" + cfg.ResourceVersion + "|" + strings.Join(keys, ",")
}

// upToDate reports whether the configuration was last found or made right for inputs.
func (r *FencingPolicyReconciler) upToDate(inputs string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.synced == inputs
}

// recordSynced records that the configuration is right for inputs.
func (r *FencingPolicyReconciler) recordSynced(inputs string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.synced = inputs
}

// withPath is cc with its path (service or URL) replaced by path.
func withPath(cc admissionregistrationv1.WebhookClientConfig, path string) (admissionregistrationv1.WebhookClientConfig, error) {
	out := *cc.DeepCopy()
	switch {
	case out.Service != nil:
		out.Service.Path = ptr.To(path)
	case out.URL != nil:
		u, err := url.Parse(*out.URL)
		if err != nil {
			return out, fmt.Errorf("parsing the webhook URL %q: %w", *out.URL, err)
		}
		u.Path = path
		out.URL = ptr.To(u.String())
	default:
		return out, fmt.Errorf("the webhook has neither a service nor a URL")
	}
	return out, nil
}
