// Package elector is Lease-based leader election that hands out fencing epochs.
//
// An Elector competes for one coordination.k8s.io/v1 Lease. It acquires and renews it only by
// compare-and-swap (an Update carrying the resourceVersion it read or last wrote, or a Create), and every
// acquisition writes a new epoch into the Lease's fencing.fencekit.io/epoch annotation in that same write.
// While it leads, user code receives a Token (the epoch, the Lease and the holder) and a leadership context.
//
// # What is guaranteed
//
// The epoch. Each acquisition of a Lease gets an epoch strictly greater than every epoch ever issued under
// that Lease's namespace and name: across holders, restarts that reuse an identity, a holder re-acquiring
// after its own lease expired, and the Lease being deleted and recreated. Two acquisitions never share an
// epoch, so at most one holder ever acts with a given epoch. (The next epoch is the previous one plus one;
// a Lease without a valid epoch, including a new one and one that lacks the fenced label, whose annotation
// nobody guarded, is seeded from a storage resourceVersion, which on Kubernetes >= 1.35 is a comparable
// integer above the resourceVersion of every earlier write and hence above every earlier epoch; see
// docs/design/epochs.md.) Epochs stay within [1, protocol.MaxEpoch]: rather than exceed it, or issue an epoch at or below
// one it has seen under the name, the elector does not acquire and logs why ("no epoch can be issued safely", with the numbers). Every Lease
// write presents its epoch in the request, as its field manager (see protocol.FieldManagerFor), as fencekit's
// Lease policy requires.
//
// # What is not guaranteed
//
// Like client-go's leaderelection, this package does not guarantee that only one client is acting as a
// leader at any instant. A holder's authority ends at its safe-work deadline,
//
//	sent + LeaseDuration*(1-MaxClockDrift) - SafetyMargin
//
// (12.85s after the send time of its last successful acquire or renew request with the defaults), and the
// leadership context is cancelled then, IsLeader turns false and Token returns the zero Token. But the
// deadline is best-effort: a process that is paused (GC, CPU starvation, SIGSTOP) cannot observe its own
// pause, and may resume and act after a standby took over. Mutual exclusion is therefore only as good as
// the resource's check of the epoch: carry Token.Epoch on every guarded write and have the resource store
// the highest epoch it has admitted and refuse lower ones (a FencedResource, see package fencing, does
// this in the apiserver).
//
// # Takeover
//
// Standbys do not poll. The electors of a process that share a client share one watch of their Leases'
// namespace (one List and one watch whatever their number; a client whose RBAC names its Leases watches
// each by name instead), re-established on error, and each elector acquires its Lease at once when the
// holder releases it, or when it expires: leaseDurationSeconds (+ LockDelay) after the standby itself observed the holder's last renewal (a change of holder, epoch, renewTime,
// acquireTime or leaseDurationSeconds; a write of a label or a finalizer is no renewal), on its own
// monotonic clock. renewTime is never compared with a wall clock, so clock offsets between nodes do not
// matter; only drift rates do, and MaxClockDrift accounts for them.
//
// # Use
//
// Build an Elector with New (a Config with the Lease, a client and callbacks; zero values take the
// defaults 15s/10s/2s, 1% drift, 2s margin) and call Run. The client needs get, list, watch, create and
// update on Leases, create and patch on Events, and create on SelfSubjectReviews (granted to every
// authenticated user by default). Config.PostAcquire is an AcquireFence: what runs between an acquisition
// and the hand-out of its token, and what that declares on the Lease; pkg/fencing builds the fences that
// declare what they raise, AcquireHook any other hook. The fencekit_elector_* metrics go to the prometheus.Registerer given with
// WithMetricsRegisterer (prometheus.DefaultRegisterer for promhttp.Handler()), and nowhere without it; the
// package does not link controller-runtime. Many electors in one process share their metrics, told apart by
// the lease label; give them one client with a raised rate limit (client-go's default is 5 requests/s).
// Package managed runs an elector inside a controller-runtime manager: leader-only runnables start while
// it leads, webhooks serve on every replica.
package elector
