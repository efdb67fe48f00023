package certs_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io/fs"
	"math/big"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"

	"github.com/fencekit/fencekit/internal/operator/certs"
)

// pemPair is a self-signed certificate and its key, PEM encoded.
type pemPair struct{ cert, key []byte }

// newPairs returns n distinct self-signed pairs (ECDSA: cheap to make).
func newPairs(t *testing.T, n int) []pemPair {
	t.Helper()
	pairs := make([]pemPair, n)
	for i := range pairs {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(int64(i + 1)), Subject: pkix.Name{CommonName: "pair"},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
		if err != nil {
			t.Fatal(err)
		}
		keyDER, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		pairs[i] = pemPair{
			cert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
			key:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
		}
	}
	return pairs
}

// leaf returns the DER of the first certificate in certPEM.
func leaf(t *testing.T, certPEM []byte) []byte {
	t.Helper()
	b, _ := pem.Decode(certPEM)
	if b == nil {
		t.Fatalf("no PEM block in %q", certPEM)
	}
	return b.Bytes
}

// checkLayout fails unless dir holds exactly the layout's entries, with want as the pair: tls.crt and tls.key
// linked through ..data to one generation directory, nothing else.
// writeFiles writes want into dir with certs.WriteFiles.
func writeFiles(t *testing.T, dir string, want pemPair) {
	t.Helper()
	if err := certs.WriteFiles(dir, want.cert, want.key); err != nil {
		t.Fatalf("WriteFiles(%s): %v", dir, err)
	}
}

func checkLayout(t *testing.T, dir string, want pemPair) {
	t.Helper()
	for _, name := range []string{"tls.crt", "tls.key"} {
		if target, err := os.Readlink(filepath.Join(dir, name)); err != nil || target != filepath.Join("..data", name) {
			t.Errorf("%s in the cert dir is not a link to ..data/%s: target %q, %v", name, name, target, err)
		}
	}
	gen, err := os.Readlink(filepath.Join(dir, "..data"))
	if err != nil {
		t.Fatalf("..data: %v", err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if diff := cmp.Diff([]string{gen, "..data", "tls.crt", "tls.key"}, names, cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
		t.Errorf("entries of the cert dir (-want +got):\n%s", diff)
	}
	if got := readFile(t, dir, "tls.crt"); !bytes.Equal(got, want.cert) {
		t.Error("tls.crt is not the last certificate written")
	}
	if got := readFile(t, dir, "tls.key"); !bytes.Equal(got, want.key) {
		t.Error("tls.key is not the last key written")
	}
}

// TestWriteFilesSwapsThePairAtOnce: a reader that loads the pair through ..data in a tight loop while the
// pair is swapped a thousand times never gets a certificate with another generation's key. (The writer
// before the directory swap renamed tls.key, then wrote and renamed tls.crt: half of such loads were
// mismatched.)
func TestWriteFilesSwapsThePairAtOnce(t *testing.T) {
	dir := t.TempDir()
	pairs := newPairs(t, 3)
	writeFiles(t, dir, pairs[0])
	const swaps = 1000
	var stop atomic.Bool
	var loads, gone int
	var mismatched []error
	var wg sync.WaitGroup
	wg.Go(func() {
		for !stop.Load() {
			// One resolution of ..data: both files come from the generation it named then.
			root, err := os.OpenRoot(filepath.Join(dir, "..data"))
			if errors.Is(err, fs.ErrNotExist) {
				gone++ // the generation ..data named was removed by the next swap: read again
				continue
			}
			if err != nil {
				mismatched = append(mismatched, err)
				continue
			}
			c, cerr := root.ReadFile("tls.crt")
			k, kerr := root.ReadFile("tls.key")
			_ = root.Close()
			if errors.Is(cerr, fs.ErrNotExist) || errors.Is(kerr, fs.ErrNotExist) {
				gone++
				continue
			}
			if err := errors.Join(cerr, kerr); err != nil {
				mismatched = append(mismatched, err)
				continue
			}
			loads++
			if _, err := tls.X509KeyPair(c, k); err != nil {
				mismatched = append(mismatched, err)
			}
		}
	})
	for i := 1; i <= swaps; i++ {
		p := pairs[i%len(pairs)]
		if err := certs.WriteFiles(dir, p.cert, p.key); err != nil {
			t.Errorf("swap %d: %v", i, err)
			break
		}
	}
	stop.Store(true)
	wg.Wait()
	t.Logf("%d swaps: %d loads of a pair, %d reads of a removed generation", swaps, loads, gone)
	if loads == 0 {
		t.Fatal("the reader loaded no pair")
	}
	if len(mismatched) > 0 {
		t.Errorf("%d of %d loads failed, first: %v", len(mismatched), loads, mismatched[0])
	}
	checkLayout(t, dir, pairs[swaps%len(pairs)])
}

// TestWriteFilesTakesOverWhatIsLeft: what an earlier run left in the cert dir (an emptyDir outlives a
// container restart) ends up in the layout with the new pair, and later swaps keep one generation, so that
// an emptyDir with a size limit does not fill up over restarts.
func TestWriteFilesTakesOverWhatIsLeft(t *testing.T) {
	for name, leave := range map[string]func(t *testing.T, dir string, old pemPair){
		// Written by a fencekit from before the directory swap.
		"plain tls.crt and tls.key": func(t *testing.T, dir string, old pemPair) {
			for file, b := range map[string][]byte{"tls.crt": old.cert, "tls.key": old.key} {
				if err := os.WriteFile(filepath.Join(dir, file), b, 0o600); err != nil {
					t.Fatal(err)
				}
			}
		},
		// Left by a swap whose process was killed before ..data moved.
		"an interrupted swap's generation directory": func(t *testing.T, dir string, old pemPair) {
			writeFiles(t, dir, old)
			if err := os.Mkdir(filepath.Join(dir, "..2026_11_30_20_41_00.123456789"), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink("..2026_11_30_20_41_00.123456789", filepath.Join(dir, "..data_tmp")); err != nil {
				t.Fatal(err)
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			pairs := newPairs(t, 3)
			leave(t, dir, pairs[0])
			for _, p := range pairs[1:] {
				writeFiles(t, dir, p)
				checkLayout(t, dir, p)
			}
		})
	}
}

// TestCertWatcherFollowsSwaps: controller-runtime's certwatcher (what the webhook and metrics servers serve
// from) follows each swap through its file events alone (its poll is set to an hour): it watches the files
// the links resolve to, and the removal of the old generation makes it re-read the links.
func TestCertWatcherFollowsSwaps(t *testing.T) {
	dir := t.TempDir()
	pairs := newPairs(t, 3)
	writeFiles(t, dir, pairs[0])
	cw, err := certwatcher.New(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"))
	if err != nil {
		t.Fatal(err)
	}
	cw = cw.WithWatchInterval(time.Hour)
	done := make(chan error, 1)
	go func() { done <- cw.Start(t.Context()) }()
	t.Cleanup(func() {
		if err := <-done; err != nil {
			t.Errorf("certwatcher: %v", err)
		}
	})
	serves := func(p pemPair) bool {
		c, err := cw.GetCertificate(nil)
		return err == nil && c != nil && bytes.Equal(c.Certificate[0], leaf(t, p.cert))
	}
	// The watches are added once Start runs: swap until the first swap is seen.
	started := false
	for i := 1; i <= 20 && !started; i++ {
		p := pairs[i%2+1]
		writeFiles(t, dir, p)
		started = wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, 500*time.Millisecond, true,
			func(context.Context) (bool, error) { return serves(p), nil }) == nil
	}
	if !started {
		t.Fatal("the certwatcher never followed a swap")
	}
	for i := range 10 {
		p := pairs[i%len(pairs)]
		if serves(p) {
			p = pairs[(i+1)%len(pairs)]
		}
		writeFiles(t, dir, p)
		if err := wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, 30*time.Second, true,
			func(context.Context) (bool, error) { return serves(p), nil }); err != nil {
			t.Fatalf("swap %d: the certwatcher still serves the previous certificate: %v", i, err)
		}
	}
}
