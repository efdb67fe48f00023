package elector

import (
	"context"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"
)

// One leadership of a Lease at a time per apiserver address: a second elector waits for the first to give
// it back (and giving back twice frees nothing more); a Lease of another name, or of the same name at
// another address, does not wait; an elector whose context ends stops waiting.
func TestTakeLeadership(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	forever := func() time.Time { return t0.Add(24 * time.Hour) }
	takeLeadership := func(ctx context.Context, key leadershipKey) (func(), bool) {
		g, outlasted, ok := takeLeadership(ctx, clk, key, forever)
		if outlasted != nil {
			t.Errorf("the leadership of %+v outlasted its bound, a day away on a clock that does not move", key)
		}
		return g, ok
	}
	client := func(host string) kubernetes.Interface {
		cs, err := kubernetes.NewForConfig(&rest.Config{Host: host})
		if err != nil {
			t.Fatal(err)
		}
		return cs
	}
	key := func(cs kubernetes.Interface, name string) leadershipKey {
		k, ok := leadershipKeyOf(cs, "ns", name)
		if !ok {
			t.Fatalf("no key for the Lease ns/%s", name)
		}
		return k
	}
	here, again, there := client("https://10.0.0.1:6443"), client("https://10.0.0.1:6443"), client("https://10.0.0.2:6443")
	if key(here, "orders") != key(again, "orders") {
		t.Fatalf("two clients of one address key one Lease apart: %+v, %+v", key(here, "orders"), key(again, "orders"))
	}
	ctx := t.Context()
	giveBack, ok := takeLeadership(ctx, key(here, "orders"))
	if !ok {
		t.Fatal("the first elector did not take the leadership")
	}
	for _, other := range []leadershipKey{key(here, "invoices"), key(there, "orders")} {
		g, ok := takeLeadership(ctx, other)
		if !ok {
			t.Fatalf("%+v waited for the leadership of %+v", other, key(here, "orders"))
		}
		g()
	}

	second := make(chan func())
	go func() {
		g, ok := takeLeadership(ctx, key(again, "orders"))
		if ok {
			second <- g
		}
	}()
	select {
	case <-second:
		t.Fatal("a second elector took the leadership of ns/orders while the first held it")
	case <-time.After(50 * time.Millisecond):
	}
	cancelled, cancel := context.WithCancel(ctx)
	stopped := make(chan bool)
	go func() {
		_, ok := takeLeadership(cancelled, key(here, "orders"))
		stopped <- ok
	}()
	cancel()
	if <-stopped {
		t.Error("an elector whose context ended took the leadership")
	}
	giveBack()
	giveBack()
	g := <-second
	third := make(chan struct{})
	go func() {
		if g, ok := takeLeadership(ctx, key(here, "orders")); ok {
			g()
			close(third)
		}
	}()
	select {
	case <-third:
		t.Fatal("giving the first leadership back twice let a third elector in beside the second")
	case <-time.After(50 * time.Millisecond):
	}
	g()
	<-third
}

// A leadership that outlasts its bound (its safe-work deadline plus ReleaseTimeout, as it reports them:
// another cluster's Lease behind the same address) is waited for until then, not for ever: the waiting
// elector then takes the key, says which leadership it outlasted, and that leadership's giving back later
// does not free the key under the new one.
func TestTakeLeadershipWaitsNoLongerThanTheBound(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: "https://gateway:443"})
	if err != nil {
		t.Fatal(err)
	}
	key, _ := leadershipKeyOf(cs, "ns", "orders")
	ctx := t.Context()
	firstBound := t0.Add(7 * time.Second)
	first, _, ok := takeLeadership(ctx, clk, key, func() time.Time { return firstBound })
	if !ok {
		t.Fatal("the first elector did not take the leadership")
	}
	type taken struct {
		giveBack  func()
		outlasted *leadership
	}
	second := make(chan taken)
	go func() {
		g, outlasted, ok := takeLeadership(ctx, clk, key, func() time.Time { return t0.Add(time.Hour) })
		if ok {
			second <- taken{g, outlasted}
		}
	}()
	waitFor(t, "the second elector's timer", clk.HasWaiters)
	clk.Step(6 * time.Second)
	select {
	case <-second:
		t.Fatal("the second elector took the leadership before the first's bound")
	case <-time.After(50 * time.Millisecond):
	}
	clk.Step(time.Second)
	got := <-second
	if got.outlasted == nil || !got.outlasted.endsBy().Equal(firstBound) {
		t.Fatalf("the second elector took the leadership at the first's bound without naming it outlasted: %+v", got.outlasted)
	}
	first()
	third := make(chan struct{})
	go func() {
		if g, _, ok := takeLeadership(ctx, clk, key, func() time.Time { return t0.Add(time.Hour) }); ok {
			g()
			close(third)
		}
	}()
	waitFor(t, "the third elector's timer", clk.HasWaiters)
	select {
	case <-third:
		t.Fatal("the first elector's giving back, after it was outlasted, freed the leadership the second holds")
	case <-time.After(50 * time.Millisecond):
	}
	got.giveBack()
	<-third
}
