package operator

// The operator's own permissions beyond its controllers' (controller-gen reads these markers): reading its
// leader election Lease (pkg/elector: get, and a watch by name, which the controllers' get/list/watch on
// Leases cover) and the Events its elector and webhook record. Creating and updating its election Lease
// LeaseName is granted in its namespace only, by name where RBAC allows it: config/rbac/leader_election_role.yaml
// and the chart's Role (a ClusterRole cannot name a namespace). The SelfSubjectReview its elector makes to
// learn its own user needs no permission.
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch
// +kubebuilder:rbac:groups="";events.k8s.io,resources=events,verbs=create;patch
