package chaos

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/fencekit/fencekit/pkg/fencing"
)

// Kind is what an operation did to the target.
type Kind string

const (
	// KindWrite replaces the target's data (a fenced Writer.Set, or the control's ConfigMap update).
	KindWrite Kind = "write"
	// KindFence raises the target's epoch without changing its data (fence-on-acquire).
	KindFence Kind = "fence"
	// KindRead reads the target's epoch and data.
	KindRead Kind = "read"
)

// Outcome is how an operation ended, as its client saw it.
type Outcome string

const (
	// Admitted: the apiserver answered success.
	Admitted Outcome = "admitted"
	// Refused: the apiserver answered a refusal (admission, the CRD rule, RBAC): the write was not stored.
	Refused Outcome = "refused"
	// Unknown: no answer (timeout, connection reset, the process died): the write may or may not be stored.
	Unknown Outcome = "unknown"
)

// Value is what a target holds: the epoch it admitted and the id of the operation whose data it stores.
type Value struct {
	Epoch int64  `json:"epoch"`
	Op    string `json:"op,omitempty"`
}

// Record is one line of a worker's history file. A worker writes a "call" record just before it sends a
// request and a "return" record when it has the answer; a process killed in between leaves only the call,
// whose outcome is then Unknown. Records of one operation share Op.
type Record struct {
	// Phase is "call" or "return".
	Phase string `json:"phase"`
	// Op is the operation's unique id, "<process>:<n>"; a write stores it in the target's data.
	Op   string `json:"op"`
	Kind Kind   `json:"kind"`
	// Process is the worker process (its holder identity); User the user it authenticates as.
	Process string `json:"process"`
	User    string `json:"user"`
	// Target is the resource, "namespace/name".
	Target string `json:"target"`
	// Epoch is the epoch the operation presents (a write or fence), as the worker believed it.
	Epoch int64 `json:"epoch,omitempty"`
	// BelievedLeader and DeadlineLeftMs are the worker's belief when it decided to write: whether its
	// elector said it led, and how much of its safe-work deadline it thought was left.
	BelievedLeader bool  `json:"believedLeader,omitempty"`
	DeadlineLeftMs int64 `json:"deadlineLeftMs,omitempty"`
	// Adversary names the attack, for writes the harness makes as an adversary (F12).
	Adversary string `json:"adversary,omitempty"`
	// At is the wall-clock time of the record, in Unix nanoseconds (one machine, one clock).
	At int64 `json:"at"`
	// Outcome, Reason (fencekit's refusal reason or the HTTP reason) and Error are set on returns.
	Outcome Outcome `json:"outcome,omitempty"`
	Reason  string  `json:"reason,omitempty"`
	Error   string  `json:"error,omitempty"`
	// Value is what a read returned.
	Value *Value `json:"value,omitempty"`
}

// Op is one operation, its call and return merged.
type Op struct {
	Record
	// Call and Return are Unix nanoseconds; Return is 0 when the outcome is Unknown for want of an answer.
	Call, Return int64
}

// Recorder appends records (a Record, a Version) to a JSON-lines file, one write(2) per line, so that the lines written before a
// SIGKILL are on disk.
type Recorder struct {
	mu sync.Mutex
	f  *os.File
}

// NewRecorder creates (or appends to) path.
func NewRecorder(path string) (*Recorder, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	return &Recorder{f: f}, nil
}

// Add writes one record.
func (r *Recorder) Add(rec any) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	_, err = r.f.Write(append(b, '\n'))
	return err
}

// Close closes the file.
func (r *Recorder) Close() error { return r.f.Close() }

// ReadJSONLines decodes every line of path into a new T; a truncated last line (a process killed while
// writing it) is skipped.
func ReadJSONLines[T any](path string) ([]T, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []T
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for n := 1; sc.Scan(); n++ {
		var v T
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			if !sc.Scan() {
				break // the last line, cut short
			}
			return nil, fmt.Errorf("%s line %d: %w", path, n, err)
		}
		out = append(out, v)
	}
	return out, sc.Err()
}

// ReadOps reads every worker history file (*.ops.jsonl) in dir and merges calls with returns, ordered by
// call time.
func ReadOps(dir string) ([]Op, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.ops.jsonl"))
	if err != nil {
		return nil, err
	}
	var recs []Record
	for _, f := range files {
		r, err := ReadJSONLines[Record](f)
		if err != nil {
			return nil, err
		}
		recs = append(recs, r...)
	}
	return MergeRecords(recs)
}

// MergeRecords pairs each call with its return; a call without a return is Unknown.
func MergeRecords(recs []Record) ([]Op, error) {
	byID := map[string]*Op{}
	var order []string
	for _, r := range recs {
		switch r.Phase {
		case "call":
			if _, dup := byID[r.Op]; dup {
				return nil, fmt.Errorf("operation %s called twice", r.Op)
			}
			byID[r.Op] = &Op{Record: r, Call: r.At}
			order = append(order, r.Op)
		case "return":
			op, ok := byID[r.Op]
			if !ok {
				return nil, fmt.Errorf("operation %s returned without a call", r.Op)
			}
			op.Return = r.At
			op.Outcome, op.Reason, op.Error, op.Value = r.Outcome, r.Reason, r.Error, r.Value
		default:
			return nil, fmt.Errorf("operation %s: unknown phase %q", r.Op, r.Phase)
		}
	}
	ops := make([]Op, 0, len(order))
	for _, id := range order {
		op := byID[id]
		if op.Return == 0 {
			op.Outcome = Unknown
			if op.Error == "" {
				op.Error = "no return recorded (the process died or the run ended)"
			}
		}
		ops = append(ops, *op)
	}
	sort.SliceStable(ops, func(i, j int) bool { return ops[i].Call < ops[j].Call })
	return ops, nil
}

// Classify says whether a failed write was certainly not stored (Refused) or may have been (Unknown). A
// status the apiserver returned before storage (admission, the CRD rule, RBAC, a conflict, a failed
// webhook call) is a refusal; a timeout, a server error or a broken connection is not an answer.
func Classify(err error) (Outcome, string) {
	if err == nil {
		return Admitted, ""
	}
	if r := fencing.ReasonOf(err); r != "" {
		return Refused, string(r)
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return Unknown, ""
	}
	s := status.Status()
	switch s.Code {
	case 400, 401, 403, 404, 409, 422, 429:
		return Refused, string(s.Reason)
	case 500:
		if strings.Contains(s.Message, "failed calling webhook") {
			return Refused, "WebhookFailed"
		}
	}
	return Unknown, string(s.Reason)
}
