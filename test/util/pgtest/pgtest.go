// Package pgtest gives a test binary a throwaway PostgreSQL server (internal/dev/postgres) and each test its
// own database on it. A test never skips because the server binaries are missing: Main fails with a message
// saying to install Debian's postgresql package (.ci/run installs it).
package pgtest

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	// The pgx database/sql driver, registered as "pgx".
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/fencekit/fencekit/internal/dev/postgres"
)

// Server is a running PostgreSQL server owned by the test binary.
type Server struct {
	*postgres.Server
	seq atomic.Int64
}

// Start starts a server (postgres.Start).
func Start() (*Server, error) {
	s, err := postgres.Start()
	if err != nil {
		return nil, err
	}
	return &Server{Server: s}, nil
}

// Main starts a server, runs the package's tests and stops the server:
//
//	var pg *pgtest.Server
//	func TestMain(m *testing.M) { pgtest.Main(m, &pg) }
func Main(m *testing.M, srv **Server) {
	s, err := Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "pgtest:", err)
		os.Exit(1)
	}
	*srv = s
	code := m.Run()
	if err := s.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "pgtest:", err)
	}
	os.Exit(code)
}

// Database creates a fresh database for t, opens it with the pgx database/sql driver and drops it when t
// ends. It returns the handle and the database's connection string.
func (s *Server) Database(t testing.TB) (*sql.DB, string) {
	t.Helper()
	name := fmt.Sprintf("test_%d", s.seq.Add(1))
	admin, err := sql.Open("pgx", s.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.ExecContext(t.Context(), "CREATE DATABASE "+name); err != nil {
		admin.Close()
		t.Fatalf("creating database %s: %v", name, err)
	}
	dsn := s.DSN(name)
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		db.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := admin.ExecContext(ctx, "DROP DATABASE "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("dropping database %s: %v", name, err)
		}
		admin.Close()
	})
	return db, dsn
}

// Rows runs query on db and returns its rows as scan reads each one, failing t on any error, the end of
// the rows' iteration included.
func Rows[T any](t testing.TB, db *sql.DB, query string, scan func(*sql.Rows) (T, error)) []T {
	t.Helper()
	rows, err := db.QueryContext(t.Context(), query)
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	defer func() { _ = rows.Close() }()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			t.Fatalf("%s: reading row %d: %v", query, len(out)+1, err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return out
}
