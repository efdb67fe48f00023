package admission_test

import (
	"net/http"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/test/util/operatortest"
	"github.com/fencekit/fencekit/test/util/testenv"
)

// beforeFirst is a RoundTripper that runs hook once, just before it sends the first request that match
// selects: the moment between two requests of one call, where another user's write can land.
type beforeFirst struct {
	next  http.RoundTripper
	match func(*http.Request) bool
	hook  func()
	seen  atomic.Int32
}

func (b *beforeFirst) RoundTrip(req *http.Request) (*http.Response, error) {
	if b.match(req) && b.seen.Add(1) == 1 {
		b.hook()
	}
	return b.next.RoundTrip(req)
}

// TestDeleteSurvivesAFreeWriteBeforeIt: NewClient's Delete writes the deletion marker, then sends the
// DELETE with the marker write's resourceVersion as its precondition. A write without the token between
// the two would fail the precondition with a conflict, as often as anyone cares to write: it is refused
// while the marker is the Lease's current epoch. A write that is admitted there (an admin's, with the
// current token) still makes the DELETE conflict: NewClient writes the marker again and retries, and the
// object is deleted.
func TestDeleteSurvivesAFreeWriteBeforeIt(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	holder, tok := configMapHolder(t, ns, "editor")
	if err := fencing.NewClient(holder.Client, tokenOf(tok)).Create(ctx,
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}, Data: map[string]string{"v": "1"}}); err != nil {
		t.Fatal(err)
	}

	editor := env.ClientAs(t, "editor")
	intrude := func() {
		mustContain(t, "the editor's free write between the holder's marker and its DELETE",
			patchConfigMap(t, editor, ns, "app", `{"metadata":{"finalizers":["example.com/hold"]}}`), fencing.IsTokenMissing,
			"by the holder of lease "+appLease)
		admin := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}}
		if err := env.Client.Patch(ctx, admin, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"note":"x"}}}`)),
			testenv.Presenting(tok.Epoch)); err != nil {
			t.Errorf("an admin's write with the current token between the holder's marker and its DELETE: %v", err)
		}
	}
	deletes := &beforeFirst{
		match: func(r *http.Request) bool { return r.Method == http.MethodDelete },
		hook:  intrude,
	}
	cfg := rest.CopyConfig(holder.Config)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { deletes.next = rt; return deletes })
	c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}

	err = fencing.NewClient(c, tokenOf(tok)).Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}})
	if err != nil {
		t.Fatalf("the holder's delete, with a free write between its marker and its DELETE: %v", err)
	}
	if n := deletes.seen.Load(); n != 2 {
		t.Errorf("the holder sent %d DELETEs, want 2 (the first refused by its precondition after the admin's write, the retry admitted)", n)
	}
	var cm corev1.ConfigMap
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "app"}, &cm); !apierrors.IsNotFound(err) {
		t.Errorf("after the holder's delete the ConfigMap is still there (err %v, finalizers %v, deletionTimestamp %v)",
			err, cm.Finalizers, cm.DeletionTimestamp)
	}
}
