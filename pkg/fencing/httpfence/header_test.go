package httpfence_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/pkg/fencing/httpfence"
	"github.com/fencekit/fencekit/pkg/protocol"
)

// TestParseHeader: only the canonical decimal form of an issued epoch is a token; every other spelling a
// buggy or hostile client might send is refused, naming the header and the value, compared as int64.
func TestParseHeader(t *testing.T) {
	for _, tc := range []struct {
		value  string
		epoch  int64
		reason protocol.Reason
	}{
		{"1", 1, ""},
		{"7", 7, ""},
		{"9007199254740991", protocol.MaxEpoch, ""},
		{"9007199254740992", 0, protocol.ReasonFutureEpoch},
		{"9223372036854775807", 0, protocol.ReasonFutureEpoch},
		{"9223372036854775808", 0, protocol.ReasonFutureEpoch},
		{"99999999999999999999999999", 0, protocol.ReasonFutureEpoch},
		{"", 0, protocol.ReasonInvalid},
		{"0", 0, protocol.ReasonInvalid},
		{"00", 0, protocol.ReasonInvalid},
		{"007", 0, protocol.ReasonInvalid},
		{"+7", 0, protocol.ReasonInvalid},
		{"-1", 0, protocol.ReasonInvalid},
		{"-0", 0, protocol.ReasonInvalid},
		{"1e3", 0, protocol.ReasonInvalid},
		{"7.0", 0, protocol.ReasonInvalid},
		{"0x7", 0, protocol.ReasonInvalid},
		{"5, 7", 0, protocol.ReasonInvalid},
		{" 7", 0, protocol.ReasonInvalid},
		{"7 ", 0, protocol.ReasonInvalid},
		{"٣", 0, protocol.ReasonInvalid}, // a non-ASCII digit
		{"7\x00", 0, protocol.ReasonInvalid},
	} {
		epoch, err := httpfence.ParseHeader(tc.value)
		if got := fencing.ReasonOf(err); epoch != tc.epoch || got != tc.reason {
			t.Errorf("ParseEpoch(%q) = %d, %v (reason %q); want %d, reason %q", tc.value, epoch, err, got, tc.epoch, tc.reason)
		}
		if err != nil && !strings.Contains(err.Error(), httpfence.HeaderToken) {
			t.Errorf("ParseEpoch(%q): error %q does not name the header", tc.value, err)
		}
	}
}

// TestTokenFromHeader: the token is required exactly once; the lease is optional but checked when sent.
func TestTokenFromHeader(t *testing.T) {
	lease := types.NamespacedName{Namespace: "default", Name: "orders-writer"}
	for _, tc := range []struct {
		name   string
		header http.Header
		want   elector.Token
		field  string // the header the error names; "" for success
	}{
		{"epoch alone", http.Header{"Fencing-Token": {"7"}}, elector.Token{Epoch: 7}, ""},
		{"epoch and lease", http.Header{"Fencing-Token": {"7"}, "Fencing-Lease": {"default/orders-writer"}}, elector.Token{Epoch: 7, Lease: lease}, ""},
		{"missing", http.Header{}, elector.Token{}, "Fencing-Token"},
		{"twice", http.Header{"Fencing-Token": {"5", "7"}}, elector.Token{}, "Fencing-Token"},
		{"malformed", http.Header{"Fencing-Token": {"007"}}, elector.Token{}, "Fencing-Token"},
		{"lease without namespace", http.Header{"Fencing-Token": {"7"}, "Fencing-Lease": {"orders-writer"}}, elector.Token{}, "Fencing-Lease"},
		{"lease with bad characters", http.Header{"Fencing-Token": {"7"}, "Fencing-Lease": {"default/Orders Writer"}}, elector.Token{}, "Fencing-Lease"},
		{"lease twice", http.Header{"Fencing-Token": {"7"}, "Fencing-Lease": {"a/b", "a/c"}}, elector.Token{}, "Fencing-Lease"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := httpfence.TokenFromHeader(tc.header)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("token (-want +got):\n%s", diff)
			}
			if tc.field == "" {
				if err != nil {
					t.Errorf("unexpected error %v", err)
				}
				return
			}
			var fe *fencing.Error
			if !asFencing(err, &fe) || fe.Resource != tc.field || !strings.Contains(fe.Message, tc.field) {
				t.Errorf("got %v, want an error naming %s", err, tc.field)
			}
		})
	}
}
