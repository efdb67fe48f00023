// Package postgres starts a throwaway PostgreSQL server: for make demo's postgres scenario and, through
// test/util/pgtest, for tests.
//
// The server runs from the PostgreSQL server binaries installed on the machine (Debian's postgresql package
// puts them in /usr/lib/postgresql/<version>/bin; the newest version there wins, then `pg_config --bindir`).
// A test never skips because they are missing: Start fails with a message saying to install the package
// (.ci/run installs it). PostgreSQL refuses to run as root, so when the tests run as root the server runs as
// the postgres system user (or nobody), in a temporary directory chowned to it. It listens on a free port on
// 127.0.0.1 and on a Unix socket inside that directory, with fsync off: it is for demos and tests, not for data.
package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Server is a running PostgreSQL server owned by this process.
type Server struct {
	dir  string
	port int
	cmd  *exec.Cmd
	done chan struct{}
	log  string
}

// BinDir finds the PostgreSQL server binaries: the newest /usr/lib/postgresql/<version>/bin holding initdb
// and postgres, else `pg_config --bindir` if postgres is there.
func BinDir() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		dirs = append(dirs, strings.TrimSpace(string(out)))
	}
	return firstServer(dirs)
}

// version reads the major version from /usr/lib/postgresql/<version>/bin.
func version(dir string) float64 {
	v, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(dir)), 64)
	return v
}

// firstServer returns the first of dirs that holds initdb and postgres.
func firstServer(dirs []string) (string, error) {
	for _, d := range dirs {
		if isFile(filepath.Join(d, "initdb")) && isFile(filepath.Join(d, "postgres")) {
			return d, nil
		}
	}
	return "", errors.New("PostgreSQL server binaries (initdb, postgres) not found in /usr/lib/postgresql/*/bin " +
		"nor in `pg_config --bindir`: install the Debian package postgresql (apt-get install -y postgresql), as .ci/run does")
}

func isFile(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

// Start initialises a database cluster in a temporary directory and starts a server on it.
func Start() (*Server, error) {
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "fencekit-pgtest-")
	if err != nil {
		return nil, err
	}
	cred, err := credential(dir)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	s := &Server{dir: dir, log: filepath.Join(dir, "postgres.log")}
	initdb := s.command(cred, filepath.Join(bin, "initdb"), "-D", s.data(), "-U", "postgres", "-A", "trust",
		"-E", "UTF8", "--locale=C", "--no-sync")
	if out, err := initdb.CombinedOutput(); err != nil {
		_ = os.RemoveAll(dir)
		hint := ""
		if cred != nil {
			hint = fmt.Sprintf(" (it runs as uid %d: every parent of %s must be searchable by that user; set TMPDIR elsewhere if not)", cred.Uid, dir)
		}
		return nil, fmt.Errorf("initdb%s: %w\n%s", hint, err, out)
	}
	// A free port can be taken by someone else between our probe and the server's bind: try a few.
	for attempt := 1; ; attempt++ {
		err = s.start(cred, filepath.Join(bin, "postgres"))
		if err == nil {
			return s, nil
		}
		if attempt == 3 {
			_ = os.RemoveAll(dir)
			return nil, err
		}
	}
}

func (s *Server) data() string { return filepath.Join(s.dir, "data") }

// credential returns who the server runs as: the current user unless it is root, in which case the postgres
// system user (or nobody), who then gets dir.
func credential(dir string) (*syscall.Credential, error) {
	if os.Getuid() != 0 {
		return nil, nil
	}
	var u *user.User
	var err error
	for _, name := range []string{"postgres", "nobody"} {
		if u, err = user.Lookup(name); err == nil {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("running as root, and PostgreSQL refuses to: no postgres or nobody user to run it as: %w", err)
	}
	uid, _ := strconv.ParseUint(u.Uid, 10, 32)
	gid, _ := strconv.ParseUint(u.Gid, 10, 32)
	if err := os.Chown(dir, int(uid), int(gid)); err != nil {
		return nil, err
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}, nil
}

func (s *Server) command(cred *syscall.Credential, name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.Dir = s.dir
	cmd.Env = append(os.Environ(), "LC_ALL=C", "LANG=C")
	// The server dies with the test binary even if Stop never runs (the signal is set after the
	// credentials change, which would otherwise clear it).
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
	return cmd
}

func (s *Server) start(cred *syscall.Credential, postgres string) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	logf, err := os.Create(s.log)
	if err != nil {
		return err
	}
	defer func() { _ = logf.Close() }() // the server keeps its own descriptor
	if cred != nil {
		if err := logf.Chown(int(cred.Uid), int(cred.Gid)); err != nil {
			return err
		}
	}
	cmd := s.command(cred, postgres, "-D", s.data(), "-h", "127.0.0.1", "-p", strconv.Itoa(port), "-k", s.dir,
		"-F", "-c", "full_page_writes=off", "-c", "synchronous_commit=off", "-c", "max_connections=100")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting postgres: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	s.port, s.cmd, s.done = port, cmd, done

	deadline := time.Now().Add(30 * time.Second)
	for {
		db, err := sql.Open("pgx", s.DSN("postgres"))
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			err = db.PingContext(ctx)
			cancel()
			_ = db.Close()
		}
		if err == nil {
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("postgres exited before accepting connections:\n%s", s.logTail())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.kill()
			return fmt.Errorf("postgres did not accept connections within 30s (last error: %w):\n%s", err, s.logTail())
		}
	}
}

func (s *Server) logTail() string {
	b, _ := os.ReadFile(s.log)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// DSN is the connection string for database db as the superuser postgres, over TCP on 127.0.0.1.
func (s *Server) DSN(db string) string {
	return fmt.Sprintf("host=127.0.0.1 port=%d user=postgres dbname=%s sslmode=disable", s.port, db)
}

// Stop shuts the server down (fast shutdown, then SIGKILL after 10 s) and removes its directory.
func (s *Server) Stop() error {
	defer func() { _ = os.RemoveAll(s.dir) }()
	_ = s.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-s.done:
		return nil
	case <-time.After(10 * time.Second):
		s.kill()
		return errors.New("postgres did not shut down within 10s: killed")
	}
}

func (s *Server) kill() {
	_ = s.cmd.Process.Kill()
	<-s.done
}

// freePort is a TCP port on 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}
