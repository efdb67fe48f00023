package httpfence_test

import (
	"errors"

	"github.com/fencekit/fencekit/pkg/fencing"
)

func asFencing(err error, fe **fencing.Error) bool { return errors.As(err, fe) }
