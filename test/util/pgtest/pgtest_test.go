package pgtest

import "testing"

var pg *Server

func TestMain(m *testing.M) { Main(m, &pg) }

// TestDatabasesAreSeparate: each test gets its own empty database on the one server, so tests in a package
// cannot see each other's tables.
func TestDatabasesAreSeparate(t *testing.T) {
	a, _ := pg.Database(t)
	b, _ := pg.Database(t)
	if _, err := a.ExecContext(t.Context(), "CREATE TABLE only_in_a (x int)"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := b.QueryRowContext(t.Context(), "SELECT count(*) FROM pg_tables WHERE tablename = 'only_in_a'").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("a table created in one test database is visible in another")
	}
	var user string
	if err := a.QueryRowContext(t.Context(), "SELECT current_user").Scan(&user); err != nil {
		t.Fatal(err)
	}
	if user != "postgres" {
		t.Errorf("connected as %q, want postgres", user)
	}
}
