package v1alpha1

// Condition types of a FencedResource.
const (
	// ConditionReady is True when the bound Lease exists and the resource is fenced at its current epoch.
	// When it is False its reason and message are those of the cause: ReasonLeaseNotFound,
	// ReasonLeaseInvalid, ReasonBehindLease or ReasonAheadOfLease.
	ConditionReady = "Ready"
	// ConditionLeaseFound is True when the bound Lease exists.
	ConditionLeaseFound = "LeaseFound"
	// ConditionFenced is True when the resource's epoch equals the Lease's current epoch, so that no holder
	// of an earlier epoch can write it.
	ConditionFenced = "Fenced"
)

// Condition reasons of a FencedResource. Every reason the operator sets is listed here.
const (
	// ReasonLeaseFound: the bound Lease exists.
	ReasonLeaseFound = "LeaseFound"
	// ReasonLeaseNotFound: the bound Lease does not exist; every fenced write is refused until it does.
	ReasonLeaseNotFound = "LeaseNotFound"
	// ReasonLeaseInvalid: the bound Lease exists but carries no valid fencekit epoch.
	ReasonLeaseInvalid = "LeaseInvalid"
	// ReasonAtLeaseEpoch: the resource's epoch equals the Lease's current epoch.
	ReasonAtLeaseEpoch = "AtLeaseEpoch"
	// ReasonBehindLease: the Lease moved to a higher epoch and the resource has not been raised to it yet;
	// writes at the resource's epoch are still refused by the webhook, which reads the Lease itself.
	ReasonBehindLease = "BehindLease"
	// ReasonAheadOfLease: the resource's epoch is above the Lease's, which happens only when the Lease was
	// deleted and recreated; the elector resumes above it.
	ReasonAheadOfLease = "AheadOfLease"
	// ReasonFenced: Ready, because the Lease exists and the resource is at its epoch.
	ReasonFenced = "Fenced"
)

// Condition reasons of a FencingPolicy's Ready condition.
const (
	// ReasonEnforced: the fencekit webhook is configured for every declared resource of the namespace and
	// the Lease exists: only its holder may write the declared objects.
	ReasonEnforced = "Enforced"
	// ReasonPolicyLeaseNotFound: the webhook is configured, but the Lease does not exist yet: every write of
	// a declared object is refused until an elector holds it (deletes are admitted).
	ReasonPolicyLeaseNotFound = "LeaseNotFound"
	// ReasonWebhookNotConfigured: the operator could not write the webhook configuration for the namespace;
	// the message says why.
	ReasonWebhookNotConfigured = "WebhookNotConfigured"
)

// The FencingPolicy condition that says which of the cluster's own controllers it refuses.
const (
	// ConditionControllersRefused is True when the policy declares a resource that one of the cluster's own
	// controllers writes and fencekit refuses (ReplicaSets, Pods, EndpointSlices, ...): its message names
	// each controller and what breaks. It is False otherwise.
	ConditionControllersRefused = "ControllersRefused"
	// ReasonRefusesControllers: ControllersRefused is True.
	ReasonRefusesControllers = "RefusesClusterControllers"
	// ReasonNoControllerRefused: ControllersRefused is False.
	ReasonNoControllerRefused = "NoControllerRefused"
)
