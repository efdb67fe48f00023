// Package controllers holds the fencekit operator's reconcilers; internal/operator starts them with its
// webhooks:
//
//   - FencedResourceReconciler keeps each FencedResource's status (the bound Lease's epoch and holder, the
//     highest admitted epoch, the Ready, LeaseFound and Fenced conditions) in step with its Lease.
//   - LeaseProtector puts a finalizer on every fenced Lease that FencedResources or FencingPolicies are
//     bound to, so that the Lease, and with it the record of the epochs it issued, cannot disappear while a
//     resource remembers them; it removes the finalizer when none are bound.
//   - FencingPolicyReconciler keeps the object webhooks' ValidatingWebhookConfiguration in step with the
//     FencingPolicies (one webhook per namespace, exactly the declared resources, failurePolicy Fail) and
//     reports each policy's Ready condition and its Lease's epoch.
//
// The first two watch Leases and map them to FencedResources through a cache index on spec.leaseName.
package controllers
