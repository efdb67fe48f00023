package httpfence

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/pkg/protocol"
)

// The request headers that carry a fencing token (docs/choosing.md specifies them for other languages).
const (
	// HeaderToken carries the epoch: exactly one field whose value is a canonical decimal integer in
	// [1, protocol.MaxEpoch] (digits only: no sign, no leading zero, no exponent, no spaces inside).
	HeaderToken = "Fencing-Token"
	// HeaderLease optionally names the Lease the epoch was issued for, as "namespace/name". It is for
	// diagnostics (stored with the fence, echoed in refusals); the check compares epochs only. When
	// present it must appear once and be well-formed.
	HeaderLease = "Fencing-Lease"
)

// maxEcho bounds how much of a malformed header value a refusal repeats.
const maxEcho = 40

// parseHeader parses a Fencing-Token value. It accepts exactly the canonical decimal form of an epoch in
// [1, protocol.MaxEpoch] and refuses anything else with a *fencing.Error naming the header and the value:
// ReasonFutureEpoch above protocol.MaxEpoch, ReasonInvalid otherwise ("", "0", "007", "+7", "-1", "1e3",
// "7.0", "0x7", "5, 7").
func parseHeader(v string) (int64, error) {
	digits := v != "" && strings.Trim(v, "0123456789") == ""
	if !digits || v[0] == '0' {
		return 0, &fencing.Error{Reason: protocol.ReasonInvalid, Resource: HeaderToken,
			Message: fmt.Sprintf("header %s: %s is not an epoch: want a decimal integer from 1 to %d, digits only, without sign or leading zeros",
				HeaderToken, echo(v), protocol.MaxEpoch)}
	}
	epoch, err := strconv.ParseInt(v, 10, 64)
	if err != nil || epoch > protocol.MaxEpoch { // all digits: the only possible error is out of range
		// Epoch stays 0: a number above 2^53-1 is not echoed as a JSON number, only quoted in the message.
		return 0, &fencing.Error{Reason: protocol.ReasonFutureEpoch, Resource: HeaderToken,
			Message: fmt.Sprintf("header %s: epoch %s was never issued: fencekit epochs are at most %d", HeaderToken, echo(v), protocol.MaxEpoch)}
	}
	return epoch, nil
}

// tokenFromHeader reads the token a request presents: the epoch from HeaderToken (required, exactly once)
// and the lease from HeaderLease (optional). The holder is not sent and stays empty.
func tokenFromHeader(h http.Header) (elector.Token, error) {
	vals := h.Values(HeaderToken)
	switch len(vals) {
	case 0:
		return elector.Token{}, &fencing.Error{Reason: protocol.ReasonInvalid, Resource: HeaderToken,
			Message: fmt.Sprintf("header %s is missing: this write is fenced and must carry the writer's fencing epoch", HeaderToken)}
	case 1:
	default:
		return elector.Token{}, &fencing.Error{Reason: protocol.ReasonInvalid, Resource: HeaderToken,
			Message: fmt.Sprintf("header %s appears %d times: send it exactly once", HeaderToken, len(vals))}
	}
	epoch, err := parseHeader(vals[0])
	if err != nil {
		return elector.Token{}, err
	}
	t := elector.Token{Epoch: epoch}
	switch leases := h.Values(HeaderLease); len(leases) {
	case 0:
	case 1:
		if t.Lease, err = parseLease(leases[0]); err != nil {
			return elector.Token{}, err
		}
	default:
		return elector.Token{}, &fencing.Error{Reason: protocol.ReasonInvalid, Resource: HeaderLease, Epoch: epoch,
			Message: fmt.Sprintf("header %s appears %d times: send it at most once", HeaderLease, len(leases))}
	}
	return t, nil
}

func parseLease(v string) (types.NamespacedName, error) {
	ns, name, ok := strings.Cut(v, "/")
	if ok && len(validation.IsDNS1123Label(ns)) == 0 && len(validation.IsDNS1123Subdomain(name)) == 0 {
		return types.NamespacedName{Namespace: ns, Name: name}, nil
	}
	return types.NamespacedName{}, &fencing.Error{Reason: protocol.ReasonInvalid, Resource: HeaderLease,
		Message: fmt.Sprintf("header %s: %s is not a Lease as namespace/name", HeaderLease, echo(v))}
}

// setHeader sets the headers that present t on a request's header h.
func setHeader(h http.Header, t elector.Token) {
	h.Set(HeaderToken, strconv.FormatInt(t.Epoch, 10))
	if t.Lease.Name != "" {
		h.Set(HeaderLease, t.Lease.String())
	} else {
		h.Del(HeaderLease)
	}
}

func echo(v string) string {
	if len(v) > maxEcho {
		v = v[:maxEcho] + "..."
	}
	return strconv.Quote(v)
}
