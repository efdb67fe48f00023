package webhook

import (
	"maps"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/fencekit/fencekit/internal/operator/admission"
)

// racingAfterAdmission is how long a write presenting a token that this webhook admitted still refuses
// the writes without the token that read the same stored object: the apiserver commits it a moment after
// admission, and a write without the token decided in that moment would commit first. Once the write
// commits, the object's resourceVersion changes and the record matches nothing.
const racingAfterAdmission = time.Second

// maxRacing is how many records the webhook keeps before it sweeps the expired ones.
const maxRacing = 4096

// racing records the writes presenting a token that this webhook is deciding, or admitted a moment ago,
// by the stored object they read (UID and resourceVersion), for the rule's Request.Racing: the apiserver
// decides a patch again after every conflict (the write carries no resourceVersion), and a write without
// the token, decided without the Lease, is quicker to decide than one presenting it; under a storm of
// them the token's write would lose every round until its timeout. A record refuses only writes without
// the token that read the very same object, so it costs nothing once the token's write committed. It
// lives in one webhook replica: a write decided by another replica is not seen (docs/design/residuals.md).
type racing struct {
	clock clock.PassiveClock
	mu    sync.Mutex
	m     map[racingKey]*racingWrite
}

type racingKey struct {
	uid types.UID
	rv  string
}

type racingWrite struct {
	epoch   int64     // the highest epoch presented
	pending int       // decisions under way
	until   time.Time // admitted: refuses until then
}

func newRacing(c clock.PassiveClock) *racing {
	return &racing{clock: c, m: map[racingKey]*racingWrite{}}
}

// racingKeyOf is the stored object r read, if r is an update of one.
func racingKeyOf(r *admission.Request) (racingKey, bool) {
	if r.Operation != admission.Update || r.Old == nil || r.Old.GetUID() == "" || r.Old.GetResourceVersion() == "" {
		return racingKey{}, false
	}
	return racingKey{uid: r.Old.GetUID(), rv: r.Old.GetResourceVersion()}, true
}

// begin records that r, which presents a token, is being decided; the returned func ends the record with
// the verdict. It returns a no-op for a request it does not track.
func (rc *racing) begin(r *admission.Request) func(admitted bool) {
	epoch, ok := r.Token()
	key, tracked := racingKeyOf(r)
	if !ok || !tracked {
		return func(bool) {}
	}
	rc.mu.Lock()
	if len(rc.m) >= maxRacing {
		rc.sweepLocked()
	}
	w := rc.m[key]
	if w == nil {
		w = &racingWrite{}
		rc.m[key] = w
	}
	w.pending++
	w.epoch = max(w.epoch, epoch)
	rc.mu.Unlock()
	return func(admitted bool) {
		rc.mu.Lock()
		defer rc.mu.Unlock()
		w.pending--
		if admitted && changes(r.Old, r.New) {
			w.until = rc.clock.Now().Add(racingAfterAdmission)
		}
		if w.pending == 0 && !rc.clock.Now().Before(w.until) && rc.m[key] == w {
			delete(rc.m, key)
		}
	}
}

// epoch returns the epoch of a write presenting a token recorded on the stored object r read, 0 if none.
func (rc *racing) epoch(r *admission.Request) int64 {
	key, tracked := racingKeyOf(r)
	if !tracked {
		return 0
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	w := rc.m[key]
	if w == nil || w.pending == 0 && !rc.clock.Now().Before(w.until) {
		return 0
	}
	return w.epoch
}

func (rc *racing) sweepLocked() {
	now := rc.clock.Now()
	for k, w := range rc.m {
		if w.pending == 0 && !now.Before(w.until) {
			delete(rc.m, k)
		}
	}
}

// changes reports whether a write turns old into updated other than in managedFields: the apiserver
// commits no write that changes nothing, and the resourceVersion stays.
func changes(old, updated *unstructured.Unstructured) bool {
	if old == nil || updated == nil {
		return true
	}
	return !equality.Semantic.DeepEqual(withoutManagedFields(old.Object), withoutManagedFields(updated.Object))
}

// withoutManagedFields is a shallow copy of o without metadata.managedFields (o's values may be raw JSON,
// which a deep copy of unstructured content refuses).
func withoutManagedFields(o map[string]any) map[string]any {
	c := maps.Clone(o)
	if meta, ok := o["metadata"].(map[string]any); ok {
		meta = maps.Clone(meta)
		delete(meta, "managedFields")
		c["metadata"] = meta
	}
	return c
}
