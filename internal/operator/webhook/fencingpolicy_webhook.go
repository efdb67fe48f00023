package webhook

import (
	"context"
	"errors"
	"fmt"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrladmission "sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/internal/operator/admission"
)

// +kubebuilder:webhook:path=/validate-fencing-fencekit-io-v1alpha1-fencingpolicy,mutating=false,failurePolicy=fail,sideEffects=None,groups=fencing.fencekit.io,resources=fencingpolicies;fencingpolicies/status,verbs=create;update,versions=v1alpha1,name=vfencingpolicy-v1alpha1.fencing.fencekit.io,admissionReviewVersions=v1,timeoutSeconds=5

// FencingPolicyValidator refuses FencingPolicies the CRD's schema cannot judge alone: in kube-system, naming a
// resource the apiserver does not serve or a cluster-scoped one, or overlapping a policy of the namespace
// bound to another Lease. On the status subresource it refuses a change of status.coverageGeneration or
// status.coverageEpoch by anyone but the operator: the object webhook trusts them (the Lease's copy
// decides a policy's objects only above the coverage epoch), and a lower one would let the copy decide
// writes of objects no acquisition's fence listed.
type FencingPolicyValidator struct {
	// reader lists the namespace's other policies without a cache, so that two policies created one after
	// the other are always compared.
	reader client.Reader
	mapper meta.RESTMapper
	// operator is the operator's own user name, the only one that may write the coverage fields.
	operator string
}

var _ ctrladmission.Validator[*fencingv1alpha1.FencingPolicy] = (*FencingPolicyValidator)(nil)

// NewFencingPolicyValidator returns a FencingPolicyValidator that lists policies with reader, resolves resources with
// mapper, and lets only user operator write the coverage fields of a policy's status.
func NewFencingPolicyValidator(reader client.Reader, mapper meta.RESTMapper, operator string) *FencingPolicyValidator {
	return &FencingPolicyValidator{reader: reader, mapper: mapper, operator: operator}
}

// SetupPolicyWebhookWithManager registers the FencingPolicy webhook on mgr's webhook server. It asks the
// apiserver who the manager is (a SelfSubjectReview): that user alone may write the coverage fields.
func SetupPolicyWebhookWithManager(mgr ctrl.Manager) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := kubernetes.NewForConfig(mgr.GetConfig())
	if err != nil {
		return err
	}
	review, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("asking the apiserver for the operator's own user (SelfSubjectReview), which alone may write a FencingPolicy's coverage: %w", err)
	}
	return ctrl.NewWebhookManagedBy(mgr, &fencingv1alpha1.FencingPolicy{}).
		WithValidator(NewFencingPolicyValidator(mgr.GetAPIReader(), mgr.GetRESTMapper(), review.Status.UserInfo.Username)).
		Complete()
}

// ValidateCreate checks a new policy, warning of the cluster controllers it will refuse.
func (v *FencingPolicyValidator) ValidateCreate(ctx context.Context, p *fencingv1alpha1.FencingPolicy) (ctrladmission.Warnings, error) {
	return admission.RefusedControllers(p), v.validate(ctx, p)
}

// ValidateUpdate checks a changed policy, warning of the cluster controllers it will refuse; or, on the
// status subresource, who changes the coverage fields.
func (v *FencingPolicyValidator) ValidateUpdate(ctx context.Context, old, p *fencingv1alpha1.FencingPolicy) (ctrladmission.Warnings, error) {
	req, err := ctrladmission.RequestFromContext(ctx)
	if err != nil {
		return nil, err
	}
	if req.SubResource == "status" {
		return nil, v.validateStatus(req.UserInfo.Username, old, p)
	}
	if p.DeletionTimestamp != nil && equality.Semantic.DeepEqual(old.Spec, p.Spec) {
		return nil, nil // a policy being deleted may lose its finalizers
	}
	return admission.RefusedControllers(p), v.validate(ctx, p)
}

// validateStatus refuses a change of the coverage fields by any user but the operator, and a decrease of
// either by anyone: the object webhook decides on its copy of the Lease only above the coverage epoch, so a
// lower one (the operator's credentials, stolen) would let a lagging copy admit a stale holder's write. The
// operator only ever raises them (the generation and the Lease's epoch never go down).
func (v *FencingPolicyValidator) validateStatus(user string, old, p *fencingv1alpha1.FencingPolicy) error {
	if old.Status.CoverageGeneration == p.Status.CoverageGeneration && old.Status.CoverageEpoch == p.Status.CoverageEpoch {
		return nil
	}
	status := fencingv1alpha1.GroupVersion.WithResource("fencingpolicies/status").GroupResource()
	if user != v.operator {
		return apierrors.NewForbidden(status, p.Name, fmt.Errorf(
			"FencingPolicy %s/%s: status.coverageGeneration and status.coverageEpoch (from %d and %d to %d and %d) are written by the fencekit operator (%s) only, not by %s: "+
				"the webhook decides the policy's objects on its copy of the Lease only above the coverage epoch",
			p.Namespace, p.Name, old.Status.CoverageGeneration, old.Status.CoverageEpoch, p.Status.CoverageGeneration, p.Status.CoverageEpoch, v.operator, user))
	}
	if p.Status.CoverageGeneration < old.Status.CoverageGeneration || p.Status.CoverageEpoch < old.Status.CoverageEpoch {
		return apierrors.NewForbidden(status, p.Name, fmt.Errorf(
			"FencingPolicy %s/%s: status.coverageGeneration and status.coverageEpoch never decrease (from %d and %d to %d and %d, by %s): "+
				"the webhook decides the policy's objects on its copy of the Lease only above the coverage epoch",
			p.Namespace, p.Name, old.Status.CoverageGeneration, old.Status.CoverageEpoch, p.Status.CoverageGeneration, p.Status.CoverageEpoch, user))
	}
	if p.Status.CoverageGeneration > p.Generation {
		return apierrors.NewForbidden(status, p.Name, fmt.Errorf(
			"FencingPolicy %s/%s: status.coverageGeneration %d is ahead of metadata.generation %d (by %s): the coverage of a generation is recorded once it exists, "+
				"or a later change of the policy would be taken for recorded", p.Namespace, p.Name, p.Status.CoverageGeneration, p.Generation, user))
	}
	return nil
}

// ValidateDelete admits every delete: deleting a policy stops fencing its objects, which RBAC on
// FencingPolicies decides.
func (v *FencingPolicyValidator) ValidateDelete(context.Context, *fencingv1alpha1.FencingPolicy) (ctrladmission.Warnings, error) {
	return nil, nil
}

// validate checks p against the rule and the namespace's other policies, a policy being deleted too: the
// object webhook counts it until it is gone, so a change of its spec that overlaps another Lease's policy
// would refuse every write of the objects both cover (TestRound8DeletingPolicySkipsValidation).
func (v *FencingPolicyValidator) validate(ctx context.Context, p *fencingv1alpha1.FencingPolicy) error {
	var others fencingv1alpha1.FencingPolicyList
	if err := v.reader.List(ctx, &others, client.InNamespace(p.Namespace)); err != nil {
		return apierrors.NewServiceUnavailable(fmt.Sprintf("listing the FencingPolicies of namespace %s: %v", p.Namespace, err))
	}
	errs := admission.ValidatePolicy(p, others.Items, v.namespaced)
	if len(errs) == 0 {
		return nil
	}
	return apierrors.NewInvalid(fencingv1alpha1.GroupVersion.WithKind("FencingPolicy").GroupKind(), p.Name, errs)
}

// namespaced resolves group/resource with the manager's RESTMapper (discovery, refreshed on a miss), and
// knows it only as the apiserver serves it: that exact group and plural name. The mapper also resolves a
// singular, or a resource of any group when the group is empty, but the webhook rules the operator writes
// and the rule's coverage compare names exactly: such a policy would fence nothing, or fence-on-acquire
// would write objects of another kind (Leases) than the webhook guards.
func (v *FencingPolicyValidator) namespaced(group, resource string) (known, isNamespaced bool, err error) {
	gvrs, err := v.mapper.ResourcesFor(schema.GroupVersionResource{Group: group, Resource: resource})
	var noMatch *meta.NoResourceMatchError
	switch {
	case meta.IsNoMatchError(err), errors.As(err, &noMatch):
		return false, false, nil
	case err != nil:
		return false, false, err
	}
	for _, gvr := range gvrs {
		if gvr.Group != group || gvr.Resource != resource {
			continue
		}
		gvk, err := v.mapper.KindFor(gvr)
		if err != nil {
			return false, false, err
		}
		mapping, err := v.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return false, false, err
		}
		return true, mapping.Scope.Name() == meta.RESTScopeNameNamespace, nil
	}
	return false, false, nil
}
