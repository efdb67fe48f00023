package elector

import (
	"errors"
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fencekit/fencekit/pkg/protocol"
)

func TestNextEpoch(t *testing.T) {
	ann := func(v string) map[string]string { return map[string]string{protocol.EpochAnnotation: v} }
	unlabelled := func(l *coordinationv1.Lease) *coordinationv1.Lease { l.Labels = nil; return l }
	withRV := func(l *coordinationv1.Lease, rv string) *coordinationv1.Lease { l.ResourceVersion = rv; return l }
	const prefix = "elector: no epoch can be issued safely: lease ns/lock: "
	tests := map[string]struct {
		lease   *coordinationv1.Lease
		listRV  string
		floor   int64
		want    epochChoice
		wantErr string
	}{
		"previous + 1":          {lease: lease("a", i32(15), ann("41")), want: epochChoice{epoch: 42}},
		"create: the list RV":   {listRV: "9001", want: epochChoice{epoch: 9001, seed: "lease is being created"}},
		"no annotation: own RV": {lease: lease("a", i32(15), nil), want: epochChoice{epoch: 500, seed: "annotation fencing.fencekit.io/epoch is missing"}},
		"garbage: own RV":       {lease: lease("a", i32(15), ann("x7")), want: epochChoice{epoch: 500, seed: `annotation fencing.fencekit.io/epoch="x7" is not a decimal int64`}},
		"leading zero: own RV":  {lease: lease("a", i32(15), ann("07")), want: epochChoice{epoch: 500, seed: `annotation fencing.fencekit.io/epoch="07" is not a decimal int64`}},
		"zero: own RV":          {lease: lease("a", i32(15), ann("0")), want: epochChoice{epoch: 500, seed: `annotation fencing.fencekit.io/epoch="0" is below 1`}},
		// Nobody guards the annotation of an unlabelled Lease.
		"unlabelled at an old epoch: own RV": {lease: unlabelled(lease("", i32(1), ann("1"))), floor: 3,
			want: epochChoice{epoch: 500, seed: "the Lease lacks the label fencing.fencekit.io/fenced=true, so no policy guarded its annotation fencing.fencekit.io/epoch"}},
		"unlabelled above its own RV": {lease: unlabelled(lease("", i32(1), ann("600"))),
			wantErr: prefix + "the next epoch 500 is not above 600, the epoch in its annotation fencing.fencekit.io/epoch; an admin must repair the Lease"},
		// The epoch space is bounded, and nothing overflows.
		"MaxEpoch - 1 + 1": {lease: lease("a", i32(15), ann("9007199254740990")), want: epochChoice{epoch: protocol.MaxEpoch}},
		"at MaxEpoch": {lease: lease("a", i32(15), ann("9007199254740991")),
			wantErr: "elector: no epoch can be issued safely: lease ns/lock is at epoch 9007199254740991; the next epoch 9007199254740992 would exceed the highest epoch 9007199254740991"},
		"above MaxEpoch": {lease: lease("a", i32(15), ann("9007199254740992")),
			wantErr: prefix + "the next epoch 500 is not above 9007199254740992, the epoch in its annotation fencing.fencekit.io/epoch; an admin must repair the Lease"},
		"at MaxInt64": {lease: lease("a", i32(15), ann("9223372036854775807")),
			wantErr: prefix + "the next epoch 500 is not above 9223372036854775807, the epoch in its annotation fencing.fencekit.io/epoch; an admin must repair the Lease"},
		"seen MaxInt64, then garbage: no overflow": {lease: lease("", i32(1), ann("garbage")), floor: math.MaxInt64,
			wantErr: prefix + "the next epoch 500 is not above 9223372036854775807, the highest epoch this elector has seen under this name; an admin must repair the Lease"},
		"seed RV above MaxEpoch": {lease: withRV(lease("a", i32(15), nil), "9007199254740992"),
			wantErr: prefix + "the seed resourceVersion 9007199254740992 exceeds the highest epoch 9007199254740991"},
		"create: list RV above MaxEpoch": {listRV: "9007199254740992",
			wantErr: prefix + "the seed resourceVersion 9007199254740992 exceeds the highest epoch 9007199254740991"},
		"below the floor: refused, not bumped": {lease: lease("a", i32(15), ann("3")), floor: 10,
			wantErr: prefix + "the next epoch 4 is not above 10, the highest epoch this elector has seen under this name; an admin must repair the Lease"},
		"create: list RV at the floor": {listRV: "10", floor: 10,
			wantErr: prefix + "the next epoch 10 is not above 10, the highest epoch this elector has seen under this name; an admin must repair the Lease"},
		"create: bad list RV":      {listRV: "abc", wantErr: `lease ns/lock: seeding the epoch of a new Lease from the list resourceVersion: elector: resourceVersion is not a positive integer: "abc"`},
		"create: leading zero RV":  {listRV: "0123", wantErr: `lease ns/lock: seeding the epoch of a new Lease from the list resourceVersion: elector: resourceVersion is not a positive integer: "0123"`},
		"no epoch and a bad RV":    {lease: withRV(lease("a", i32(15), nil), "-1"), wantErr: `lease ns/lock: seeding the epoch from the Lease's resourceVersion (annotation fencing.fencekit.io/epoch is missing): elector: resourceVersion is not a positive integer: "-1"`},
		"create above MaxInt64 RV": {listRV: "9223372036854775808", wantErr: `lease ns/lock: seeding the epoch of a new Lease from the list resourceVersion: elector: resourceVersion is not a positive integer: "9223372036854775808"`},
	}
	name := types.NamespacedName{Namespace: "ns", Name: "lock"}
	for n, tc := range tests {
		t.Run(n, func(t *testing.T) {
			got, err := nextEpoch(name, tc.lease, tc.listRV, tc.floor)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("error = %v\nwant %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(epochChoice{})); diff != "" {
				t.Errorf("nextEpoch() (-want +got):\n%s", diff)
			}
		})
	}
	if _, err := nextEpoch(name, nil, "abc", 0); !errors.Is(err, errInvalidResourceVersion) {
		t.Errorf("a bad resourceVersion is not errInvalidResourceVersion: %v", err)
	}
	if _, err := nextEpoch(name, lease("a", i32(15), ann("9007199254740991")), "", 0); !errors.Is(err, errNoEpoch) {
		t.Errorf("an exhausted epoch is not errNoEpoch: %v", err)
	}
}
