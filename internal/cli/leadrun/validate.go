package leadrun

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// ValidateLease checks the Lease's namespace and name as the apiserver would (a namespace is an RFC 1123
// label, a Lease name an RFC 1123 subdomain), so that a name the apiserver can never accept fails at once
// instead of being retried. The error names the flag, the value and the rule, on one line.
func ValidateLease(namespace, name string) error {
	if name == "" {
		return fmt.Errorf("--lease is required")
	}
	if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
		return fmt.Errorf("--lease %q is not a valid Lease name: %s", name, strings.Join(msgs, "; "))
	}
	if namespace == "" {
		return fmt.Errorf("--namespace is required (or $POD_NAMESPACE)")
	}
	if msgs := validation.IsDNS1123Label(namespace); len(msgs) > 0 {
		return fmt.Errorf("--namespace %q is not a valid namespace name: %s", namespace, strings.Join(msgs, "; "))
	}
	return nil
}
