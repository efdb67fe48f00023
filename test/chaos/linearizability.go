package chaos

import (
	"fmt"
	"time"

	"github.com/anishathalye/porcupine"
)

// The fenced register: the sequential specification a FencedResource claims. Its state is the highest
// epoch admitted and the op whose data it holds. A write at epoch e takes effect only if e is not below
// the state's epoch, and then holds its own op; a fence raises the epoch and keeps the data; a read returns
// the state. Only operations that took effect are checked (refused writes, and unknown ones the observer
// never saw stored, had none), so an admitted stale write, or a read that saw a write before it happened
// or after it was overwritten, has no linearization.

type regInput struct {
	Kind  Kind
	Epoch int64
	Op    string
}

// LinearizationCheckTimeout bounds porcupine's search; past it the result is Unknown.
var LinearizationCheckTimeout = 60 * time.Second

// Linearization is porcupine's verdict on one target's operations.
type Linearization struct {
	Result porcupine.CheckResult
	Info   porcupine.LinearizationInfo
}

// FencedRegister is the porcupine model of a FencedResource (and of the control's ConfigMap, which
// claims nothing and so should fail it).
var FencedRegister = porcupine.Model{
	Init: func() any { return Value{} },
	Step: func(state, input, output any) (bool, any) {
		s, in := state.(Value), input.(regInput)
		switch in.Kind {
		case KindRead:
			return output.(Value) == s, s
		case KindWrite:
			if in.Epoch < s.Epoch {
				return false, s
			}
			return true, Value{Epoch: in.Epoch, Op: in.Op}
		case KindFence:
			if in.Epoch < s.Epoch {
				return false, s
			}
			return true, Value{Epoch: in.Epoch, Op: s.Op}
		}
		return false, s
	},
	DescribeOperation: func(input, output any) string {
		in := input.(regInput)
		switch in.Kind {
		case KindRead:
			o := output.(Value)
			return fmt.Sprintf("read() -> epoch %d, %s", o.Epoch, o.Op)
		case KindFence:
			return fmt.Sprintf("fence(%d)", in.Epoch)
		default:
			return fmt.Sprintf("write(%d, %s)", in.Epoch, in.Op)
		}
	},
	DescribeState: func(state any) string {
		s := state.(Value)
		return fmt.Sprintf("epoch %d, %s", s.Epoch, s.Op)
	},
}

// CheckLinearizable checks ops (one target's operations that took effect, reads included) against
// FencedRegister.
func CheckLinearizable(ops []Op) Linearization {
	clients := map[string]int{}
	history := make([]porcupine.Operation, 0, len(ops))
	for _, op := range ops {
		id, ok := clients[op.Process]
		if !ok {
			id = len(clients)
			clients[op.Process] = id
		}
		ret := op.Return
		if ret == 0 {
			ret = 1<<63 - 1
		}
		var out any = Value{}
		if op.Value != nil {
			out = *op.Value
		}
		history = append(history, porcupine.Operation{
			ClientId: id, Input: regInput{Kind: op.Kind, Epoch: op.Epoch, Op: op.Op},
			Call: op.Call, Output: out, Return: ret, Metadata: op.Op,
		})
	}
	res, info := porcupine.CheckOperationsVerbose(FencedRegister, history, LinearizationCheckTimeout)
	return Linearization{Result: res, Info: info}
}

// VisualizeTo writes porcupine's HTML visualization of lin to path.
func VisualizeTo(path string, lin Linearization) error {
	return porcupine.VisualizePath(FencedRegister, lin.Info, path)
}
