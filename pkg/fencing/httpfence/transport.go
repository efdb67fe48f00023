package httpfence

import (
	"fmt"
	"net/http"

	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/pkg/fencing/sqlfence"
)

// Transport is an http.RoundTripper that presents the current fencing token on every request it sends
// (HeaderToken, and HeaderLease when the token names a Lease). It asks Token for the token on every request,
// so it follows re-acquisitions (pass the elector's Token method); with the zero Token, or an epoch outside
// [1, protocol.MaxEpoch], it sends nothing and fails with fencing.ErrNoToken or the epoch's error.
type Transport struct {
	// Token returns the token to present; the zero Token means no leadership.
	Token func() elector.Token
	// Base sends the requests; http.DefaultTransport when nil.
	Base http.RoundTripper
}

var _ http.RoundTripper = (*Transport)(nil)

// RoundTrip implements http.RoundTripper. It does not change req: it sends a copy with the headers set.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	var tok elector.Token
	if t.Token != nil {
		tok = t.Token()
	}
	var err error
	if tok.IsZero() {
		err = fencing.ErrNoToken
	} else {
		err = sqlfence.CheckEpoch("fencing token", tok.Epoch)
	}
	if err != nil {
		if req.Body != nil {
			_ = req.Body.Close() // a RoundTripper closes the body, even on errors
		}
		return nil, fmt.Errorf("refusing to send %s %s: %w", req.Method, req.URL.Redacted(), err)
	}
	out := req.Clone(req.Context())
	setHeader(out.Header, tok)
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	return base.RoundTrip(out)
}
