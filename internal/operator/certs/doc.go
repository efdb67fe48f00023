// Package certs gives the fencekit operator its webhook serving certificate without cert-manager.
//
// AddRotator registers a certificate rotation with a manager (certificates made with
// open-policy-agent/cert-controller's functions): it keeps a CA and a serving certificate for the webhook
// Service in a Secret of the operator's namespace, injects the CA into the caBundle of the operator's
// ValidatingWebhookConfiguration and renews both well before they expire (the CA is valid for ten years,
// the serving certificate for one, each renewed 90 days ahead of expiry).
// Every replica runs it: the Secret's resourceVersion decides which replica's certificate wins, and each
// replica writes the Secret's certificate into its own CertDir (an emptyDir), where controller-runtime's
// webhook server reloads it. The dir has the layout of the kubelet's projected volumes: tls.crt and tls.key
// link to ..data/<name>, and ..data to a generation directory that a new pair replaces in one rename, so the
// certificate never changes without its key (a reader that opens the two files one after the other can
// still straddle a swap: controller-runtime's certwatcher then fails to parse the pair, keeps serving the
// one it has and reads again on the file events the swap ends with). A dir holding plain files from an older
// fencekit is converted on the first write. With cert-manager, AddRotator is not called and the operator
// never writes the (read-only) Secret volume; pointed at a read-only dir, AddRotator fails naming it.
//
// What it guarantees: before AddRotator returns, CertDir holds a certificate signed by the Secret's CA (so the
// webhook server, which controller-runtime starts before any cache, finds its files); the returned channel
// closes once the caBundle of the ValidatingWebhookConfiguration holds that CA, so a readiness check gated on
// it only lets traffic in when the apiserver can verify the webhook.
//
// Least privilege: its cache lists and watches only the Secret and the webhook configuration, each by a
// metadata.name field selector, so that RBAC rules restricted to those names (get, list, watch, update)
// are all it needs; it never reads another Secret of a shared namespace. It writes only the caBundle of
// the webhooks, which is all the chart's admission policy lets the operator change there.
package certs
