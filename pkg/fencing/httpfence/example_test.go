package httpfence_test

import (
	"database/sql"
	"net/http"

	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/pkg/fencing/httpfence"
	"github.com/fencekit/fencekit/pkg/fencing/sqlfence"
)

// A service fences each order separately; its handler writes through the fenced transaction, so the
// write commits with the raise of the order's epoch or not at all.
func ExampleMiddleware() {
	var db *sql.DB
	store, err := httpfence.NewPostgresStore(db, sqlfence.Options{})
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.Handle("PUT /orders/{id}", httpfence.Middleware(store,
		func(r *http.Request) (string, error) { return "orders/" + r.PathValue("id"), nil },
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			tok, _ := httpfence.TokenFrom(r.Context())
			_, err := httpfence.Tx(r.Context()).ExecContext(r.Context(),
				`UPDATE orders SET status = 'shipped', epoch = $1 WHERE id = $2`, tok.Epoch, r.PathValue("id"))
			if err != nil {
				http.Error(w, "storing the order failed", http.StatusInternalServerError)
			}
		})))
	_ = http.ListenAndServe("127.0.0.1:8080", mux)
}

// A lease holder's client presents its current token on every request and stops on a 409.
func ExampleTransport() {
	var e *elector.Elector // running; Token follows re-acquisitions
	client := &http.Client{Transport: &httpfence.Transport{Token: e.Token}}
	req, _ := http.NewRequest(http.MethodPut, "http://orders.internal/orders/42", nil)
	resp, err := client.Do(req)
	if err == nil {
		err = httpfence.ResponseError(resp)
		resp.Body.Close()
	}
	if fencing.IsStale(err) {
		return // a newer holder exists: stop writing
	}
}
