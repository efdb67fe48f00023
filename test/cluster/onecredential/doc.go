// Package onecredential runs fencekit next to the real kube-controller-manager under a single credential
// (--use-service-account-credentials=false, a common setup): every controller writes as
// system:kube-controller-manager, not as its own kube-system ServiceAccount. It asserts that what
// internal/operator/admission admits for a kube-system controller it also admits for that user: a Deployment
// declared in a FencingPolicy rolls out and an orphan-mode deletion of fenced objects completes, and a
// stale holder is still refused.
//
// Two controller managers against one apiserver would fight over the same objects, so this package has
// a control plane of its own (package cluster runs the per-controller one).
package onecredential
