package elector

import "github.com/fencekit/fencekit/pkg/protocol"

// Token is what one acquisition of a Lease hands to user code: the fencing epoch, and which Lease and
// holder it belongs to. It is the wire contract's protocol.Token: the fenced clients present it, and
// fencekit's admission reads it back from the request.
type Token = protocol.Token
