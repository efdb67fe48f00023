package electorbench

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// NewClientGoElector is the client-go contender of the benchmarks: leaderelection on Lease ns/lease as id,
// with client-go's usual timings (lease 15 s, renew deadline 10 s, retry 2 s), the same as fencekit's defaults.
func NewClientGoElector(cs kubernetes.Interface, ns, lease, id string, release bool, callbacks leaderelection.LeaderCallbacks) (*leaderelection.LeaderElector, error) {
	return leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: ns, Name: lease},
			Client:     cs.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: id},
		},
		LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second,
		ReleaseOnCancel: release,
		Callbacks:       callbacks,
	})
}
