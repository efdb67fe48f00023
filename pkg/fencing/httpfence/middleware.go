package httpfence

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/go-logr/logr"

	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/pkg/fencing/sqlfence"
	"github.com/fencekit/fencekit/pkg/protocol"
)

// KeyFunc names the fenced key a request writes to (for example the resource in its path). An error
// refuses the request with 400 and the error's text: write it for the client.
type KeyFunc func(*http.Request) (string, error)

// Middleware guards next, a handler that accepts writes, with fencing tokens. For each request it reads the
// token (tokenFromHeader), names the key (key), and asks store to admit the token for the key and run next
// meanwhile (Store.Admit): for each key, handlers of admitted requests run one at a time, in non-decreasing
// epoch order, and a request whose epoch is below one already admitted never reaches next.
//
// Responses: next's response, buffered and sent after Admit returns (so that a PostgresStore's commit
// decides it); 400 for a missing, repeated or malformed token or key; 409 for a stale epoch; 503 (500 for
// a key with no fence) when the fence could not be checked or committed, in which case next's response is
// discarded. Refusals carry a JSON Refusal. next must not hijack the connection or rely on flushing.
// Every request to the returned handler must carry a token: wrap the routes that write, not the reads.
func Middleware(store Store, key KeyFunc, next http.Handler) http.Handler {
	return &guard{store: store, key: key, next: next}
}

type guard struct {
	store Store
	key   KeyFunc
	next  http.Handler
}

type tokenKey struct{}

// TokenFrom returns the token Middleware admitted for the request (its holder is empty: it is not sent).
func TokenFrom(ctx context.Context) (elector.Token, bool) {
	t, ok := ctx.Value(tokenKey{}).(elector.Token)
	return t, ok
}

// errHandlerStatus makes a store roll back when the handler answered with an error status.
var errHandlerStatus = errors.New("handler answered with an error status")

func (g *guard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	token, err := tokenFromHeader(r.Header)
	if err != nil {
		r := Refusal{Reason: string(protocol.ReasonInvalid), Message: err.Error(), Header: HeaderToken}
		if fe := (*fencing.Error)(nil); errors.As(err, &fe) {
			r = Refusal{Reason: string(fe.Reason), Message: fe.Message, Header: fe.Resource, Epoch: fe.Epoch}
		}
		writeRefusal(w, http.StatusBadRequest, r)
		return
	}
	key, err := g.key(r)
	if err != nil {
		writeRefusal(w, http.StatusBadRequest, Refusal{Reason: string(protocol.ReasonInvalid), Epoch: token.Epoch,
			Message: "cannot tell which fenced key this request writes: " + err.Error()})
		return
	}
	buf := &bufferedResponse{header: http.Header{}}
	err = g.store.Admit(r.Context(), key, token, func(ctx context.Context) error {
		g.next.ServeHTTP(buf, r.WithContext(context.WithValue(ctx, tokenKey{}, token)))
		if buf.code() >= 400 {
			return errHandlerStatus
		}
		return nil
	})
	var fe *fencing.Error
	switch {
	case err == nil || errors.Is(err, errHandlerStatus):
		buf.sendTo(w)
	case errors.As(err, &fe) && fe.Reason == protocol.ReasonStale:
		writeRefusal(w, http.StatusConflict, Refusal{Reason: string(fe.Reason), Message: fe.Message, Key: key, Epoch: fe.Epoch, AdmittedEpoch: fe.LeaseEpoch})
	case errors.As(err, &fe):
		writeRefusal(w, http.StatusBadRequest, Refusal{Reason: string(fe.Reason), Message: fe.Message, Key: key, Epoch: token.Epoch})
	case errors.Is(err, sqlfence.ErrFenceNotFound):
		logr.FromContextOrDiscard(r.Context()).Error(err, "Fenced key has no fence", "key", key)
		writeRefusal(w, http.StatusInternalServerError, Refusal{Reason: ReasonUnavailable, Key: key, Epoch: token.Epoch,
			Message: fmt.Sprintf("key %s has no fence on this service: nothing was written", key)})
	default:
		logr.FromContextOrDiscard(r.Context()).Error(err, "Fence check failed", "key", key, "epoch", token.Epoch)
		w.Header().Set("Retry-After", "1")
		writeRefusal(w, http.StatusServiceUnavailable, Refusal{Reason: ReasonUnavailable, Key: key, Epoch: token.Epoch,
			Message: fmt.Sprintf("the fence of key %s could not be checked or committed at epoch %d: nothing was written; retry", key, token.Epoch)})
	}
}

// bufferedResponse holds a handler's response until the fence's outcome is known.
type bufferedResponse struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (b *bufferedResponse) Header() http.Header { return b.header }

func (b *bufferedResponse) WriteHeader(code int) {
	if b.status == 0 {
		b.status = code
	}
}

func (b *bufferedResponse) Write(p []byte) (int, error) {
	if b.status == 0 {
		b.status = http.StatusOK
	}
	return b.body.Write(p)
}

func (b *bufferedResponse) code() int {
	if b.status == 0 {
		return http.StatusOK
	}
	return b.status
}

func (b *bufferedResponse) sendTo(w http.ResponseWriter) {
	for k, v := range b.header {
		w.Header()[k] = v
	}
	if w.Header().Get("Content-Length") == "" {
		w.Header().Set("Content-Length", strconv.Itoa(b.body.Len()))
	}
	w.WriteHeader(b.code())
	_, _ = w.Write(b.body.Bytes())
}

func quote(s string) string { return strconv.Quote(s) }
