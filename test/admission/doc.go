// Package admission tests fenced writes through fencekit's admission on a real kube-apiserver and etcd
// (envtest), with the operator started in the test process (test/util/operatortest): the threat model's
// case table on the real apiserver (TestCases), the webhooks' decisions on FencedResources and on the
// objects a FencingPolicy declares, the writes that need no token and their bounds, coverage, the
// webhooks' copy of the Lease, deletion, and the fenced Writer and fence-on-acquire against them. The
// attacks on each rule are in the file of that rule.
package admission
