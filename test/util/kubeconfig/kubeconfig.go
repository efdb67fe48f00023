// Package kubeconfig writes the kubeconfig files through which the tests' child processes (workers,
// examples, cmd/fencekit) reach the test's apiserver as a given user.
package kubeconfig

import (
	"path/filepath"
	"testing"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Write writes a kubeconfig to path that reaches cfg.Host as cfg does: its CA, its client certificate or
// bearer token, and its impersonation (user and groups).
func Write(path string, cfg *rest.Config) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["test"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["test"] = &clientcmdapi.AuthInfo{
		ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken,
		Impersonate: cfg.Impersonate.UserName, ImpersonateGroups: cfg.Impersonate.Groups,
	}
	kc.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "test"}
	kc.CurrentContext = "test"
	return clientcmd.WriteToFile(*kc, path)
}

// ForTest writes the kubeconfig of cfg into a temporary directory of t and returns its path.
func ForTest(t testing.TB, cfg *rest.Config) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := Write(path, cfg); err != nil {
		t.Fatalf("writing a kubeconfig for %s: %v", cfg.Host, err)
	}
	return path
}
