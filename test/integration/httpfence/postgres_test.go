package httpfence_test

import (
	"database/sql"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/fencekit/fencekit/pkg/fencing/httpfence"
	"github.com/fencekit/fencekit/pkg/fencing/sqlfence"
	"github.com/fencekit/fencekit/test/util/httpfencetest"
	"github.com/fencekit/fencekit/test/util/pgtest"
)

// ordersService is a service that stores order writes in PostgreSQL, fenced per order by a PostgresStore:
// the handler writes through the fenced transaction. A request with ?fail answers 500 after writing;
// ?drop has its connection terminated after writing, before the commit.
func ordersService(t *testing.T, opts sqlfence.Options) (*httptest.Server, *sql.DB, *httpfence.PostgresStore) {
	t.Helper()
	db, store := postgresStore(t, opts)
	admin, _ := pg.Database(t)
	if err := mustFence(t, store, "orders/1").Create(t.Context(), db); err != nil {
		t.Fatal(err)
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		tx := httpfence.Tx(ctx)
		tok, _ := httpfence.TokenFrom(ctx)
		if tx == nil {
			http.Error(w, "no fenced transaction", http.StatusInternalServerError)
			return
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO order_writes (key, epoch) VALUES ($1, $2)`, r.URL.Path, tok.Epoch); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		switch {
		case r.URL.Query().Has("fail"):
			http.Error(w, "payment provider unavailable", http.StatusBadGateway)
			return
		case r.URL.Query().Has("drop"):
			var pid int
			var ok bool
			if err := tx.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			if err := admin.QueryRowContext(ctx, `SELECT pg_terminate_backend($1, 5000)`, pid).Scan(&ok); err != nil || !ok {
				t.Errorf("terminating backend %d: %v %v", pid, ok, err)
			}
		}
		_, _ = io.WriteString(w, "written at "+strconv.FormatInt(tok.Epoch, 10))
	})
	srv := httptest.NewServer(httpfence.Middleware(store, httpfencetest.KeyFromPath, h))
	t.Cleanup(srv.Close)
	return srv, db, store
}

// postgresStore is a PostgresStore with opts on a fresh database that has the fence table and the table
// order_writes, which the handlers of ordersService and TestPostgresStoreOrdersHandlers append to.
func postgresStore(t *testing.T, opts sqlfence.Options) (*sql.DB, *httpfence.PostgresStore) {
	t.Helper()
	db, _ := pg.Database(t)
	store, err := httpfence.NewPostgresStore(db, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := mustFence(t, store, "orders/1").CreateTable(t.Context(), db); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(t.Context(), `CREATE TABLE order_writes (id bigserial PRIMARY KEY, key text, epoch bigint)`); err != nil {
		t.Fatal(err)
	}
	return db, store
}

// orderWrites returns the epochs of the committed order_writes, in the order they were made.
func orderWrites(t *testing.T, db *sql.DB) []int64 {
	t.Helper()
	return pgtest.Rows(t, db, `SELECT epoch FROM order_writes ORDER BY id`, func(r *sql.Rows) (epoch int64, err error) {
		err = r.Scan(&epoch)
		return epoch, err
	})
}

// TestPostgresStore: the handler's write commits with the raise; a stale request gets 409 and writes
// nothing; a handler that fails, or whose connection is dropped before the commit, keeps neither its
// write nor the raise (the client gets the handler's error, or 503 and never a 200); a key without a fence
// is refused with 500, never created.
func TestPostgresStore(t *testing.T) {
	srv, db, store := ordersService(t, sqlfence.Options{})
	f, _ := store.Fence("orders/1")
	epoch := func() int64 {
		e, err := f.Epoch(t.Context(), db)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	if code, r := httpfencetest.Send(t, srv, "/orders/1", "7"); code != http.StatusOK {
		t.Fatalf("epoch 7: %d %+v", code, r)
	}
	if code, r := httpfencetest.Send(t, srv, "/orders/1", "6"); code != http.StatusConflict || r.Epoch != 6 || r.AdmittedEpoch != 7 || r.Key != "orders/1" {
		t.Errorf("epoch 6 after 7: %d %+v, want 409 naming orders/1, 6 and 7", code, r)
	}
	if code, r := httpfencetest.Send(t, srv, "/orders/1?fail", "8"); code != http.StatusBadGateway {
		t.Errorf("failing handler at epoch 8: %d %+v, want the handler's 502", code, r)
	}
	if got := epoch(); got != 7 {
		t.Errorf("fence at epoch %d after a failed handler at 8, want 7 (rolled back)", got)
	}
	if code, r := httpfencetest.Send(t, srv, "/orders/1?drop", "9"); code != http.StatusServiceUnavailable || r.Reason != httpfence.ReasonUnavailable {
		t.Errorf("dropped connection at epoch 9: %d %+v, want 503", code, r)
	}
	if got := epoch(); got != 7 {
		t.Errorf("fence at epoch %d after a dropped commit at 9, want 7", got)
	}
	if code, r := httpfencetest.Send(t, srv, "/orders/2", "9"); code != http.StatusInternalServerError || r.Key != "orders/2" {
		t.Errorf("key without a fence: %d %+v, want 500 naming orders/2", code, r)
	}
	if _, err := (mustFence(t, store, "orders/2")).Epoch(t.Context(), db); !errors.Is(err, sqlfence.ErrFenceNotFound) {
		t.Errorf("a request created the fence orders/2: %v", err)
	}
	if code, r := httpfencetest.Send(t, srv, "/orders/1", "9"); code != http.StatusOK {
		t.Errorf("epoch 9 retried: %d %+v", code, r)
	}
	if diff := cmp.Diff([]int64{7, 9}, orderWrites(t, db)); diff != "" {
		t.Errorf("kept writes (-want +got):\n%s", diff)
	}
}

// TestPostgresStoreOrdersHandlers: a request admitted at epoch 5 whose handler is slow holds its fence;
// a request at epoch 6 waits for it in the database, so the epoch-5 write commits first.
func TestPostgresStoreOrdersHandlers(t *testing.T) {
	db, store := postgresStore(t, sqlfence.Options{Create: true})
	codes, _ := httpfencetest.Overlap(t, store, func(r *http.Request, epoch int64) error {
		_, err := httpfence.Tx(r.Context()).ExecContext(r.Context(), `INSERT INTO order_writes (epoch) VALUES ($1)`, epoch)
		return err
	}, func() bool {
		var n int
		err := db.QueryRowContext(t.Context(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n)
		return err == nil && n == 1
	})
	if diff := cmp.Diff([]int{http.StatusOK, http.StatusOK}, codes); diff != "" {
		t.Errorf("statuses (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]int64{5, 6}, orderWrites(t, db)); diff != "" {
		t.Errorf("commit order (-want +got):\n%s", diff)
	}
}

func mustFence(t *testing.T, s *httpfence.PostgresStore, key string) *sqlfence.Fence {
	t.Helper()
	f, err := s.Fence(key)
	if err != nil {
		t.Fatal(err)
	}
	return f
}
