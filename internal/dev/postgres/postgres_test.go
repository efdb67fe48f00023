package postgres

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMissingServerSaysWhatToInstall: without server binaries the helper fails (it never skips) and says
// which package to install; a directory with only a client (psql, pg_config) does not count.
func TestMissingServerSaysWhatToInstall(t *testing.T) {
	clientOnly := t.TempDir()
	if err := os.WriteFile(filepath.Join(clientOnly, "psql"), nil, 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := firstServer([]string{clientOnly, filepath.Join(t.TempDir(), "missing")})
	if err == nil || !strings.Contains(err.Error(), "apt-get install -y postgresql") {
		t.Errorf("got %v, want an error saying to install the postgresql package", err)
	}
	server := t.TempDir()
	for _, b := range []string{"initdb", "postgres"} {
		if err := os.WriteFile(filepath.Join(server, b), nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := firstServer([]string{clientOnly, server}); got != server || err != nil {
		t.Errorf("firstServer = %q, %v; want %q", got, err, server)
	}
}

// TestNewestVersionFirst: with several major versions installed, the newest one's binaries are used.
func TestNewestVersionFirst(t *testing.T) {
	dirs := []string{"/usr/lib/postgresql/9.6/bin", "/usr/lib/postgresql/15/bin", "/usr/lib/postgresql/16/bin"}
	if v := version(dirs[2]); v != 16 {
		t.Errorf("version(%s) = %v, want 16", dirs[2], v)
	}
	if version(dirs[0]) >= version(dirs[1]) {
		t.Errorf("9.6 sorts after 15")
	}
}
