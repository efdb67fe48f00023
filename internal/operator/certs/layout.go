package certs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// The cert dir has the kubelet's layout for projected volumes (its AtomicWriter), so that the certificate and
// its key change together:
//
//	..2026_11_30_20_41_00.123456789/tls.crt   one generation of the pair
//	..2026_11_30_20_41_00.123456789/tls.key
//	..data -> ..2026_11_30_20_41_00.123456789
//	tls.crt -> ..data/tls.crt
//	tls.key -> ..data/tls.key
//
// A new pair is written into a new generation directory, then ..data is switched to it by renaming a new
// link over it (rename(2) replaces ..data in one step), then the old generation is removed.
const (
	// dataLink names the link to the current generation.
	dataLink = "..data"
	// dataLinkTmp names the link renamed over dataLink.
	dataLinkTmp = "..data_tmp"
	// generationPrefix is the time layout of a generation's name (os.MkdirTemp adds a random suffix).
	generationPrefix = "..2006_01_02_15_04_05."
)

// WriteFiles makes cert and key the pair in dir, switched in one rename: a reader that resolves ..data sees
// the old pair or the new one, never one file of each. A reader that opens tls.crt and tls.key one after the
// other resolves ..data twice, and can still get one file of each generation if a swap falls between its two
// opens; controller-runtime's certwatcher then fails to parse the pair, keeps the certificate it has and
// reads again on the next file event. A dir that holds plain tls.crt and tls.key (an older fencekit, or files
// put there by hand) is converted first, keeping their content.
func WriteFiles(dir string, cert, key []byte) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	files := []file{{keyCert, cert}, {keyKey, key}}
	if err := convertPlainFiles(dir, files); err != nil {
		return fmt.Errorf("converting %s to linked generations: %w", dir, err)
	}
	if err := swapGeneration(dir, files); err != nil {
		return fmt.Errorf("writing the certificate into %s: %w", dir, err)
	}
	return nil
}

// file is one file of a generation.
type file struct {
	name string
	data []byte
}

// convertPlainFiles turns a dir whose tls.crt or tls.key are not the layout's links into the layout without
// changing what a reader sees: their current content becomes a generation, and each file is then replaced by
// its link in one rename.
func convertPlainFiles(dir string, files []file) error {
	var current []file
	for _, f := range files {
		linked, err := isLink(dir, f.name)
		if err != nil {
			return err
		}
		if linked {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, f.name))
		if errors.Is(err, fs.ErrNotExist) {
			continue // nothing to keep: the swap creates its link
		}
		if err != nil {
			return err
		}
		current = append(current, file{f.name, data})
	}
	if len(current) == 0 {
		return nil
	}
	return swapGeneration(dir, current)
}

// isLink says whether dir/name is the layout's link to ..data/name.
func isLink(dir, name string) (bool, error) {
	path := filepath.Join(dir, name)
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if fi.Mode()&fs.ModeSymlink == 0 {
		return false, nil
	}
	target, err := os.Readlink(path)
	if err != nil {
		return false, err
	}
	return target == filepath.Join(dataLink, name), nil
}

// swapGeneration writes files into a new generation, switches ..data to it, links each file's name to
// ..data/<name> if it is not yet, and removes the other generations.
func swapGeneration(dir string, files []file) error {
	gen, err := os.MkdirTemp(dir, time.Now().UTC().Format(generationPrefix))
	if err != nil {
		return err
	}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(gen, f.name), f.data, 0o600); err != nil {
			_ = os.RemoveAll(gen)
			return err
		}
	}
	if err := replaceWithLink(dir, dataLinkTmp, filepath.Base(gen), dataLink); err != nil {
		_ = os.RemoveAll(gen)
		return err
	}
	for _, f := range files {
		linked, err := isLink(dir, f.name)
		if err != nil {
			return err
		}
		if !linked {
			if err := replaceWithLink(dir, "."+f.name+"_tmp", filepath.Join(dataLink, f.name), f.name); err != nil {
				return err
			}
		}
	}
	return removeOldGenerations(dir, filepath.Base(gen))
}

// replaceWithLink makes dir/name a link to target in one rename, through the temporary link dir/tmp.
func replaceWithLink(dir, tmp, target, name string) error {
	tmpPath := filepath.Join(dir, tmp)
	if err := os.Remove(tmpPath); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err // left over from an interrupted swap, and not removable
	}
	if err := os.Symlink(target, tmpPath); err != nil {
		return err
	}
	if err := os.Rename(tmpPath, filepath.Join(dir, name)); err != nil {
		_ = os.Remove(tmpPath)
		return err
	}
	return nil
}

// removeOldGenerations removes the generations other than current, including any an interrupted swap left.
func removeOldGenerations(dir, current string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		if e.IsDir() && e.Name() != current && isGeneration(e.Name()) {
			errs = append(errs, os.RemoveAll(filepath.Join(dir, e.Name())))
		}
	}
	return errors.Join(errs...)
}

// isGeneration says whether name is a generation directory's name: ..<UTC time>.<suffix>.
func isGeneration(name string) bool {
	stamp, _, ok := strings.Cut(strings.TrimPrefix(name, ".."), ".")
	if !ok || !strings.HasPrefix(name, "..") {
		return false
	}
	_, err := time.Parse(strings.TrimSuffix(strings.TrimPrefix(generationPrefix, ".."), "."), stamp)
	return err == nil
}
