package leasepolicy_test

import (
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fencekit/fencekit/pkg/protocol"
	"github.com/fencekit/fencekit/test/util/testenv"
)

// token is the field manager a Lease write presents ("" presents none, as kubectl and plain clients do).
func token(epoch string) []client.UpdateOption {
	if epoch == "" {
		return nil
	}
	return []client.UpdateOption{client.FieldOwner(protocol.FieldManagerPrefix + epoch)}
}

// acquire sets what an acquisition by w at epoch writes.
func acquire(w testenv.Worker, epoch string) func(*coordinationv1.Lease) {
	return func(l *coordinationv1.Lease) {
		l.Annotations[protocol.EpochAnnotation] = epoch
		l.Annotations[protocol.AcquirerAnnotation] = w.User
		l.Spec.HolderIdentity = ptr.To(w.Holder)
	}
}

func renew(l *coordinationv1.Lease) { l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(time.Now())) }

// leaseWrite is one update of Lease l by a worker, and the Lease policy's answer.
type leaseWrite struct {
	name    string
	as      testenv.Worker
	mutate  func(*coordinationv1.Lease)
	present string // the epoch the request presents as its field manager; "" none
	want    string // "" admits
}

// runLeaseWrites makes each write in turn on Lease ns/l (an admitted write changes it for the next),
// then makes breakGlass's change as an admin (system:masters), which the policy lets break glass do
// whatever it refuses to others.
func runLeaseWrites(t *testing.T, ns string, writes []leaseWrite, breakGlass func(*coordinationv1.Lease)) {
	t.Helper()
	for _, tc := range writes {
		t.Run(tc.name, func(t *testing.T) {
			l := env.ReadLease(t, ns, "l")
			tc.mutate(l)
			testenv.WantPolicy(t, tc.as.Client.Update(t.Context(), l, token(tc.present)...), tc.want)
		})
	}
	l := env.ReadLease(t, ns, "l")
	breakGlass(l)
	if err := env.Client.Update(t.Context(), l); err != nil {
		t.Fatalf("break glass: an admin's update was refused: %v", err)
	}
}

// TestLeasePolicy checks the ValidatingAdmissionPolicy that binds each epoch to the user that acquired it,
// one write after another on one Lease (an admitted write changes it for the next).
func TestLeasePolicy(t *testing.T) {
	ns := env.Namespace(t)
	a, b := env.NewWorker(t, ns, "worker-a"), env.NewWorker(t, ns, "worker-b")
	a.Acquire(t, ns, "l", 3)
	const presentThree = "must present that epoch in the request: send fieldManager fencing.fencekit.io/epoch=3"
	notAnEpoch := func(v string) string {
		return `fenced lease l: annotation fencing.fencekit.io/epoch="` + v + `" is not an epoch: send a decimal integer in [1, 9007199254740991], without sign or leading zeros`
	}
	runLeaseWrites(t, ns, []leaseWrite{
		{"the acquirer renews, presenting its epoch", a, renew, "3", ""},
		// A write that leaves the epoch out inherits it from storage; only the request proves it.
		{"the acquirer renews without presenting its epoch", a, renew, "",
			"fenced lease l: a write that acquires, renews or releases it at epoch 3 " + presentThree + ` (this request sent "")`},
		{"the acquirer renews presenting an older epoch", a, renew, "2", presentThree + ` (this request sent "fencing.fencekit.io/epoch=2")`},
		{"another user renews", b, renew, "3", "only worker-a-user, which acquired epoch 3, may renew or release it; worker-b-user may not"},
		{"another user releases", b, func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = ptr.To("") }, "3",
			"only worker-a-user, which acquired epoch 3, may renew or release it"},
		// A stale replica sharing the acquirer's ServiceAccount tries to take over the current epoch.
		{"a replica of the acquirer's user names itself holder at the current epoch", a,
			func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = ptr.To("worker-a-2") }, "3",
			`fenced lease l: under epoch 3 spec.holderIdentity may only stay "worker-a" or become "" (release), not "worker-a-2"; another holder needs an acquisition at epoch 4`},
		{"the epoch goes down", a, func(l *coordinationv1.Lease) { l.Annotations[protocol.EpochAnnotation] = "2" }, "2",
			"fenced lease l: epoch may not go down, from 3 to 2"},
		// Epochs are bounded, and one acquisition cannot skip ahead.
		{"an acquisition that skips epochs", b, acquire(b, "5"), "5", "fenced lease l: an acquisition of epoch 3 must take epoch 4, not 5"},
		{"an acquisition at the highest int64", b, acquire(b, "9223372036854775807"), "9223372036854775807", notAnEpoch("9223372036854775807")},
		{"an acquisition one above MaxEpoch", b, acquire(b, "9007199254740992"), "9007199254740992", notAnEpoch("9007199254740992")},
		// These name the value and the rule, not "type conversion error".
		{"a non-numeric epoch", b, acquire(b, "4a"), "4a", notAnEpoch("4a")},
		{"an epoch with a leading zero", b, acquire(b, "04"), "04", notAnEpoch("04")},
		{"a negative epoch", b, acquire(b, "-4"), "-4", notAnEpoch("-4")},
		{"an epoch beyond int64", b, acquire(b, "99999999999999999999"), "", notAnEpoch("99999999999999999999")},
		{"an epoch too long to show", b, acquire(b, strings.Repeat("7", 40)), "", notAnEpoch(strings.Repeat("7", 24) + "...")},
		{"an acquisition naming someone else", b, func(l *coordinationv1.Lease) {
			acquire(b, "4")(l)
			l.Annotations[protocol.AcquirerAnnotation] = "worker-a-user"
		}, "4", "an acquisition at epoch 4 must name its requester worker-b-user as acquirer"},
		{"an acquisition without presenting its epoch", b, acquire(b, "4"), "",
			"a write that acquires, renews or releases it at epoch 4 must present that epoch in the request: send fieldManager fencing.fencekit.io/epoch=4"},
		{"an acquisition without a holder", b, func(l *coordinationv1.Lease) {
			acquire(b, "4")(l)
			l.Spec.HolderIdentity = ptr.To("")
		}, "4", "fenced lease l: an acquisition at epoch 4 must set spec.holderIdentity"},
		{"an acquisition presenting the previous epoch", b, acquire(b, "4"), "3",
			`send fieldManager fencing.fencekit.io/epoch=4 (this request sent "fencing.fencekit.io/epoch=3")`},
		{"the acquirer rewritten without a new epoch", b, func(l *coordinationv1.Lease) { l.Annotations[protocol.AcquirerAnnotation] = "worker-b-user" }, "3",
			"the acquirer of epoch 3 is worker-a-user and cannot change without a new epoch"},
		{"the epoch removed", a, func(l *coordinationv1.Lease) { delete(l.Annotations, protocol.EpochAnnotation) }, "3",
			"fenced lease l: the annotation fencing.fencekit.io/epoch cannot be removed (it is 3)"},
		{"the fenced label removed", a, func(l *coordinationv1.Lease) { delete(l.Labels, protocol.FencedLabel) }, "3",
			"the label fencing.fencekit.io/fenced=true cannot be removed"},
		// Metadata other than the epoch, the acquirer and the label stays free: the operator's finalizer.
		{"another user changes only other metadata, presenting nothing", b, func(l *coordinationv1.Lease) {
			l.Labels["team"] = "orders"
			l.Annotations["example.com/note"] = "x"
		}, "", ""},
		{"another user acquires at the next epoch, presenting it", b, acquire(b, "4"), "4", ""},
		{"the old acquirer renews at its epoch after the takeover", a, renew, "3",
			"only worker-b-user, which acquired epoch 4, may renew or release it; worker-a-user may not"},
		{"the new acquirer releases, presenting its epoch", b, func(l *coordinationv1.Lease) {
			l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds = ptr.To(""), ptr.To[int32](1)
		}, "4", ""},
		{"the released holder takes the Lease back under the same epoch", b, func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = ptr.To("worker-b") }, "4",
			`under epoch 4 spec.holderIdentity may only stay "" or become "" (release), not "worker-b"; another holder needs an acquisition at epoch 5`},
		{"the previous acquirer takes it at the next epoch", a, acquire(a, "5"), "5", ""},
	}, func(l *coordinationv1.Lease) { l.Annotations[protocol.EpochAnnotation] = "1" }) // the epoch goes down
}

// TestLeasePolicyCreate: a create chooses its starting epoch, within [1, MaxEpoch], presenting it; from
// MaxEpoch no acquisition is possible (the epoch space is bounded, and only a create of a missing Lease
// can spend it).
func TestLeasePolicyCreate(t *testing.T) {
	ctx := t.Context()
	ns := env.Namespace(t)
	a, b := env.NewWorker(t, ns, "worker-a"), env.NewWorker(t, ns, "worker-b")
	// create writes the acquisition at epoch, presenting the epoch present (0 presents none).
	create := func(name string, epoch, present int64) error {
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		testenv.AcquiredBy(l, a.User, a.Holder, epoch, 15*time.Second)
		var opts []client.CreateOption
		if present != 0 {
			opts = append(opts, testenv.Presenting(present))
		}
		return a.Client.Create(ctx, l, opts...)
	}
	testenv.WantPolicy(t, create("above", protocol.MaxEpoch+1, protocol.MaxEpoch+1),
		`fenced lease above: annotation fencing.fencekit.io/epoch="9007199254740992" is not an epoch: send a decimal integer in [1, 9007199254740991]`)
	testenv.WantPolicy(t, create("untokened", 7, 0),
		`fenced lease untokened: a write that acquires, renews or releases it at epoch 7 must present that epoch in the request: send fieldManager fencing.fencekit.io/epoch=7 (this request sent "")`)
	testenv.WantPolicy(t, create("seven", 7, 7), "")
	testenv.WantPolicy(t, create("top", protocol.MaxEpoch, protocol.MaxEpoch), "")
	l := env.ReadLease(t, ns, "top")
	acquire(b, "9007199254740992")(l)
	testenv.WantPolicy(t, b.Client.Update(ctx, l, token("9007199254740992")...),
		`fenced lease top: annotation fencing.fencekit.io/epoch="9007199254740992" is not an epoch`)
}

// TestLeasePolicyUntrustedEpoch: an unlabelled Lease. An admin deletes a live Lease and recreates it
// unlabelled at an old epoch; nobody guarded that annotation, so the acquisition that labels the Lease
// must take its resourceVersion (above every epoch ever issued, as pkg/elector seeds it), not epoch+1. The
// same holds for a labelled Lease whose epoch is not valid.
func TestLeasePolicyUntrustedEpoch(t *testing.T) {
	ctx := t.Context()
	ns := env.Namespace(t)
	b := env.NewWorker(t, ns, "worker-b")
	stale := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "u",
			Annotations: map[string]string{protocol.EpochAnnotation: "1", protocol.AcquirerAnnotation: "admin"}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(""), LeaseDurationSeconds: ptr.To[int32](1)},
	}
	if err := env.Client.Create(ctx, stale); err != nil {
		t.Fatal(err)
	}
	l := env.ReadLease(t, ns, "u")
	rv := l.ResourceVersion
	untrusted := "fenced lease u: it has no trusted epoch (it was not labelled fencing.fencekit.io/fenced=true), so an acquisition must take its resourceVersion " + rv + " as epoch, not "
	l.Labels = map[string]string{protocol.FencedLabel: "true"}
	testenv.WantPolicy(t, b.Client.Update(ctx, l.DeepCopy()), untrusted+"1")
	acquire(b, "2")(l)
	testenv.WantPolicy(t, b.Client.Update(ctx, l.DeepCopy(), token("2")...), untrusted+"2")
	acquire(b, rv)(l)
	testenv.WantPolicy(t, b.Client.Update(ctx, l.DeepCopy(), token(rv)...), "")

	// A labelled Lease whose epoch an admin broke: the next acquisition is seeded the same way.
	l = env.ReadLease(t, ns, "u")
	l.Annotations[protocol.EpochAnnotation] = "garbage"
	if err := env.Client.Update(ctx, l); err != nil {
		t.Fatal(err)
	}
	l = env.ReadLease(t, ns, "u")
	rv = l.ResourceVersion
	acquire(b, "5")(l)
	testenv.WantPolicy(t, b.Client.Update(ctx, l.DeepCopy(), token("5")...),
		"fenced lease u: it has no trusted epoch (no valid fencing.fencekit.io/epoch), so an acquisition must take its resourceVersion "+rv+" as epoch, not 5")
	acquire(b, rv)(l)
	testenv.WantPolicy(t, b.Client.Update(ctx, l, token(rv)...), "")
}

// TestLeasePolicyFences: the fence-on-acquire declaration (annotation fencing.fencekit.io/fences). fencekit's
// admission decides writes at the current epoch from its watch-fed copy of a Lease that declares a kind,
// trusting that every later acquisition raises that kind before it hands out its token. So a declared kind
// can never be dropped: not by an acquisition of an elector that does not fence (it would inherit a promise
// it does not keep), not by the holder, not by anyone else presenting nothing; it changes only in an
// acquisition; and only the four values exist. A fenced Lease's ownerReferences cannot change either.
func TestLeasePolicyFences(t *testing.T) {
	ns := env.Namespace(t)
	a, b := env.NewWorker(t, ns, "worker-a"), env.NewWorker(t, ns, "worker-b")
	a.Acquire(t, ns, "l", 3)
	declare := func(v string) func(*coordinationv1.Lease) {
		return func(l *coordinationv1.Lease) {
			if v == "" {
				delete(l.Annotations, protocol.FencesAnnotation)
				return
			}
			l.Annotations[protocol.FencesAnnotation] = v
		}
	}
	both := func(fs ...func(*coordinationv1.Lease)) func(*coordinationv1.Lease) {
		return func(l *coordinationv1.Lease) {
			for _, f := range fs {
				f(l)
			}
		}
	}
	const dropFR = "fenced lease l declares that every acquisition fences its FencedResources (annotation fencing.fencekit.io/fences="
	const dropObjects = "fenced lease l declares that every acquisition fences its FencingPolicy objects (annotation fencing.fencekit.io/fences="
	// Break glass may drop it (docs/design/residuals.md says what that costs).
	runLeaseWrites(t, ns, []leaseWrite{
		{"a value that is not a declaration", a, declare("FencedResources"), "",
			`fenced lease l: annotation fencing.fencekit.io/fences="FencedResources" is not a fence-on-acquire declaration: send fencedresources, objects or fencedresources,objects`},
		{"the kinds in the other order", a, declare("objects,fencedresources"), "", `annotation fencing.fencekit.io/fences="objects,fencedresources" is not a fence-on-acquire declaration`},
		{"a long value is cut in the message", a, declare(strings.Repeat("x", 100)), "", `fencing.fencekit.io/fences="` + strings.Repeat("x", 40) + `..." is not`},
		// Only an acquirer commits the Lease's future holders to fencing: another workload with the elector
		// role must not lock the holder's own configuration out of its Lease.
		{"another user declares FencedResources, presenting nothing", b, declare("fencedresources"), "",
			`fenced lease l: the fence-on-acquire declaration (annotation fencing.fencekit.io/fences) changes only in an acquisition, by the elector that acquires it (it is "")`},
		{"the holder declares it while renewing", a, both(renew, declare("fencedresources")), "3", "changes only in an acquisition"},
		{"an acquisition declares FencedResources", b, both(acquire(b, "4"), declare("fencedresources")), "4", ""},
		{"the holder renews keeping it", b, renew, "4", ""},
		{"the holder drops it", b, both(renew, declare("")), "4", dropFR + `fencedresources); this write would leave ""`},
		{"another user drops it, presenting nothing", a, declare(""), "", dropFR},
		{"it is swapped for objects", b, declare("objects"), "", dropFR + `fencedresources); this write would leave "objects"`},
		{"an acquisition by an elector that does not fence", a, both(acquire(a, "5"), declare("")), "5",
			dropFR + `fencedresources); this write would leave "": only an elector that fences them on acquire`},
		{"objects are added outside an acquisition", b, declare("fencedresources,objects"), "", "changes only in an acquisition"},
		{"an acquisition adds objects", a, both(acquire(a, "5"), declare("fencedresources,objects")), "5", ""},
		{"an acquisition that keeps FencedResources only", b, both(acquire(b, "6"), declare("fencedresources")), "6",
			dropObjects + `fencedresources,objects); this write would leave "fencedresources"`},
		{"an acquisition that keeps both", b, both(acquire(b, "6"), declare("fencedresources,objects")), "6", ""},
		// An owner that does not exist would have the garbage collector delete the Lease (the elector role
		// grants no delete, and the operator's finalizer alone only delays a deletion).
		{"another user adds an ownerReference", a, func(l *coordinationv1.Lease) {
			l.OwnerReferences = append(l.OwnerReferences, metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "gone", UID: "00000000-0000-0000-0000-000000000000"})
		}, "", "fenced lease l: its ownerReferences cannot be set or changed"},
	}, declare(""))
}
