package httpfence

import (
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"

	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/pkg/protocol"
)

// Refusal is the JSON body of a response by which Middleware refuses a request (Content-Type
// application/json): 409 for a stale epoch, 400 for a missing or malformed token or key, 500 or 503 when the
// fence could not be checked.
type Refusal struct {
	// Reason is fencekit's reason (protocol.ReasonStale: "FencingStaleEpoch", "FencingInvalid",
	// "FencingFutureEpoch"), or "FencingUnavailable" when the fence could not be checked.
	Reason string `json:"reason"`
	// Message is the human-readable explanation, naming the header or key and the numbers.
	Message string `json:"message"`
	// Header is the request header at fault (400 only).
	Header string `json:"header,omitempty"`
	// Key is the fenced key.
	Key string `json:"key,omitempty"`
	// Epoch is the epoch the request carried; AdmittedEpoch the highest epoch the key has admitted
	// (409 only). Both are at most 2^53-1, exact as JSON numbers in every language.
	Epoch         int64 `json:"epoch,omitempty"`
	AdmittedEpoch int64 `json:"admittedEpoch,omitempty"`
}

// ReasonUnavailable is the reason of a refusal because the fence could not be checked (store failure).
const ReasonUnavailable = "FencingUnavailable"

func writeRefusal(w http.ResponseWriter, code int, r Refusal) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(r) //nolint:errchkjson // a Refusal always encodes; a failed write has no one to report to
}

// maxRefusalBytes bounds how much of a response ResponseError reads.
const maxRefusalBytes = 64 << 10

// ResponseError returns the refusal a fenced service answered with as a *fencing.Error (so that
// fencing.IsStale works on the client), or nil if resp is not a refusal (any status other than 400 and 409,
// or a body that is not a Refusal). It reads and closes the body only for those statuses.
func ResponseError(resp *http.Response) error {
	if resp.StatusCode != http.StatusConflict && resp.StatusCode != http.StatusBadRequest {
		return nil
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "application/json" {
		return nil
	}
	defer func() { _ = resp.Body.Close() }()
	var r Refusal
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxRefusalBytes)).Decode(&r); err != nil || r.Reason == "" {
		return errors.New("fenced service refused the request with status " + resp.Status + " and an unreadable body")
	}
	resource := r.Key
	if resource == "" {
		resource = r.Header
	}
	return &fencing.Error{Reason: protocol.Reason(r.Reason), Resource: resource, Epoch: r.Epoch, LeaseEpoch: r.AdmittedEpoch, Message: r.Message}
}
