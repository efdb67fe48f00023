package devcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fencekit/fencekit/pkg/protocol"
)

// InstallAdmission applies fencekit's Lease policy and the fencekit-elector ClusterRole from the
// repository's config/ and waits until the policy is enforced.
func InstallAdmission(ctx context.Context, root string, admin *rest.Config, c client.Client) error {
	if err := ApplyFiles(ctx, c, filepath.Join(root, "config", "policy", "*.yaml"), filepath.Join(root, "config", "rbac", "elector_role.yaml")); err != nil {
		return err
	}
	return WaitForLeasePolicy(ctx, admin, c, "default")
}

// ApplyFiles server-side-applies every object of the YAML files matched by the glob patterns, as field
// manager "fencekit-devcluster".
func ApplyFiles(ctx context.Context, c client.Client, patterns ...string) error {
	for _, pattern := range patterns {
		files, err := filepath.Glob(pattern)
		if err != nil {
			return err
		}
		if len(files) == 0 {
			return fmt.Errorf("no manifests match %s", pattern)
		}
		for _, f := range files {
			if err := applyFile(ctx, c, f); err != nil {
				return err
			}
		}
	}
	return nil
}

func applyFile(ctx context.Context, c client.Client, path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		var u unstructured.Unstructured
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("decoding %s: %w", path, err)
		}
		if len(u.Object) == 0 {
			continue
		}
		if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(&u), client.FieldOwner("fencekit-devcluster"), client.ForceOwnership); err != nil {
			return fmt.Errorf("applying %s %s from %s: %w", u.GetKind(), u.GetName(), path, err)
		}
	}
}

// BindElector binds the fencekit-elector ClusterRole to user in namespace with a RoleBinding, and waits
// until the apiserver's authorizer, which learns of bindings from its own informer, allows it.
func BindElector(ctx context.Context, c client.Client, namespace, user string) error {
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "fencekit-elector-", Namespace: namespace},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "fencekit-elector"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
	}
	if err := c.Create(ctx, rb); err != nil {
		return fmt.Errorf("binding fencekit-elector to %s: %w", user, err)
	}
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: user, ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: namespace, Verb: "update", Group: "fencing.fencekit.io", Resource: "fencedresources"},
		}}
		if err := c.Create(ctx, sar); err != nil {
			return false, err
		}
		return sar.Status.Allowed, nil
	})
	if err != nil {
		return fmt.Errorf("the fencekit-elector binding of %s never took effect: %w", user, err)
	}
	return nil
}

// probeUser is the user WaitForLeasePolicy impersonates: it is neither an admin nor in the break-glass group.
const probeUser = "fencekit:lease-policy-probe"

// WaitForLeasePolicy waits until fencekit's ValidatingAdmissionPolicy on fenced Leases is enforced: the
// apiserver loads a policy a moment after it is created. It probes with a dry-run Lease create, as a user
// with just enough RBAC, that the policy must deny; nothing is stored.
func WaitForLeasePolicy(ctx context.Context, admin *rest.Config, c client.Client, namespace string) error {
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "fencekit-lease-policy-probe", Namespace: namespace},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"create"}}},
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name, Namespace: namespace},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: probeUser}},
	}
	for _, obj := range []client.Object{role, binding} {
		if err := c.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating the policy probe's RBAC: %w", err)
		}
		defer func() { _ = c.Delete(context.WithoutCancel(ctx), obj) }()
	}
	cfg := rest.CopyConfig(admin)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: probeUser, Groups: []string{"system:authenticated"}}
	probe, err := client.New(cfg, client.Options{Scheme: c.Scheme()})
	if err != nil {
		return err
	}
	var last error
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		lease := &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{
				GenerateName: "fencekit-policy-probe-", Namespace: namespace,
				Labels:      map[string]string{protocol.FencedLabel: "true"},
				Annotations: map[string]string{protocol.EpochAnnotation: "1", protocol.AcquirerAnnotation: "someone-else"},
			},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("probe")},
		}
		// The probe presents its epoch, as the elector would, so that the acquirer rule is what denies it.
		last = probe.Create(ctx, lease, client.DryRunAll, client.FieldOwner(protocol.FieldManagerFor(1)))
		return apierrors.IsForbidden(last) && strings.Contains(last.Error(), "must name its requester"), nil
	})
	if err != nil {
		return fmt.Errorf("fencekit's lease policy is not enforced after 30s (last probe: %w): %w", last, err)
	}
	return nil
}
