package demo

import (
	"strings"
	"testing"
)

func accepted(b bool) *bool { return &b }

// good are the runs a successful demo shows.
func good() (fenced, unfenced *Result) {
	fenced = &Result{Scenario: PausedHolder, Fenced: true, W1Epoch: 7, W2Epoch: 8,
		LateWrite: Event{Msg: "write", Write: 2, Epoch: 7, Accepted: accepted(false), Reason: "FencingStaleEpoch", Error: "stale epoch 7"},
		Final:     map[string]any{"writer": "W2"}}
	unfenced = &Result{Scenario: PausedHolder, LateWrite: Event{Msg: "write", Write: 2, Accepted: accepted(true)},
		Final: map[string]any{"writer": "W1"}}
	return fenced, unfenced
}

// TestCheck: a failed demo names the run that went wrong, what it saw and what to try, one line per run.
func TestCheck(t *testing.T) {
	timeout := Event{Msg: "write", Write: 2, Accepted: accepted(false), Error: `Get "https://127.0.0.1:1/x": context deadline exceeded`}
	for name, tc := range map[string]struct {
		change func(f, u *Result)
		want   []string // one per line, in order
	}{
		"success": {change: func(f, u *Result) {}},
		"fenced write got no answer": {
			change: func(f, u *Result) { f.LateWrite = timeout },
			want:   []string{"fenced run: W1's write after SIGCONT got no answer from the apiserver (Get \"https://127.0.0.1:1/x\": context deadline exceeded); the machine may be overloaded: run it again, and if it keeps failing, give it more room with --pause=40s"},
		},
		"both got no answer": {
			change: func(f, u *Result) { f.LateWrite, u.LateWrite = timeout, timeout },
			want:   []string{"fenced run: W1's write after SIGCONT got no answer", "unfenced run: W1's write after SIGCONT got no answer"},
		},
		"fencekit admitted the stale write": {
			change: func(f, u *Result) { f.LateWrite = Event{Msg: "write", Write: 2, Epoch: 7, Accepted: accepted(true)} },
			want:   []string{"fenced run: fencekit ADMITTED the paused holder's write at epoch 7 after W2 acquired epoch 8: this is a fencing bug"},
		},
		"refused for another reason": {
			change: func(f, u *Result) { f.LateWrite.Reason, f.LateWrite.Error = "FencingNotHolder", "lease expired" },
			want:   []string{"fenced run: W1's write after SIGCONT was refused as FencingNotHolder, not as a stale epoch (lease expired)"},
		},
		"unfenced overwritten again": {
			change: func(f, u *Result) { u.Final["writer"] = "W2" },
			want:   []string{"unfenced run: W1's late write was accepted but the target's stored data is map[writer:W2], not W1's"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			f, u := good()
			tc.change(f, u)
			err := Check(f, u)
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("Check = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatal("Check = nil, want an error")
			}
			lines := strings.Split(err.Error(), "\n")
			if len(lines) != len(tc.want)+1 {
				t.Fatalf("Check = %q: want a heading and %d lines", err, len(tc.want))
			}
			for i, w := range tc.want {
				if got := strings.TrimSpace(lines[i+1]); !strings.HasPrefix(got, w) {
					t.Errorf("line %d = %q, want it to start with %q", i+1, got, w)
				}
			}
		})
	}
}
