package operator

// The operator's own permissions beyond its controllers' (controller-gen reads these markers):
// its leader election Lease (pkg/elector: create on first start, update to renew, get/list/watch it), the
// Events its elector and webhook record, and the SelfSubjectReview its elector makes to learn its own user.
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch
// +kubebuilder:rbac:groups="";events.k8s.io,resources=events,verbs=create;patch
