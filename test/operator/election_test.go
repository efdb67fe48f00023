package operator_test

import (
	"fmt"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/types"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/internal/operator"
	"github.com/fencekit/fencekit/test/util/operatortest"
	"github.com/fencekit/fencekit/test/util/testenv"
)

// TestLeaderElection runs two operator replicas electing with pkg/elector: the controllers run on the
// leader, and when it stops (releasing its Lease) the other replica takes over and reconciles. Replica b
// serves no webhook, so that the test can stop it while a's webhook keeps admitting writes.
func TestLeaderElection(t *testing.T) {
	ns := env.Namespace(t)
	elect := func(webhook bool) func(*operator.Options) {
		return func(o *operator.Options) {
			o.LeaderElect, o.LeaderElectionNamespace = true, ns
			if !webhook {
				o.WebhookPort = 0
			}
		}
	}
	holder := func() string {
		var l coordinationv1.Lease
		if err := env.Client.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: operator.LeaseName}, &l); err != nil || l.Spec.HolderIdentity == nil {
			return ""
		}
		return *l.Spec.HolderIdentity
	}
	reconciled := func(name string) func() (bool, string) {
		return func() (bool, string) {
			fr := testenv.Read[fencingv1alpha1.FencedResource](t, env.Client, ns, name)
			return fr.Status.ObservedGeneration == fr.Generation, fmt.Sprintf("status %+v", fr.Status)
		}
	}

	stopB := operatortest.Start(t, env, elect(false))
	var first string
	testenv.Eventually(t, "replica b leads", func() (bool, string) { first = holder(); return first != "", "holder " + first })
	operatortest.Start(t, env, elect(true)) // replica a: standby, serving the webhook
	env.Declare(t, ns, "one", "l")
	testenv.Eventually(t, "the leader reconciles", reconciled("one"))

	stopB()
	testenv.Eventually(t, "replica a takes over", func() (bool, string) { h := holder(); return h != "" && h != first, "holder " + h })
	env.Declare(t, ns, "two", "l")
	testenv.Eventually(t, "the new leader reconciles", reconciled("two"))
}
