package elector

import (
	"context"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// One leadership of a Lease at a time per apiserver address: a second elector waits for the first to give
// it back (and giving back twice frees nothing more); a Lease of another name, or of the same name at
// another address, does not wait; an elector whose context ends stops waiting.
func TestTakeLeadership(t *testing.T) {
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
