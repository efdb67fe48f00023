package chaos

import "github.com/fencekit/fencekit/test/util/netproxy"

// The network faults are test/util/netproxy's proxy and modes.
type (
	Proxy = netproxy.Proxy
	Mode  = netproxy.Mode
)

const (
	Pass      = netproxy.Pass
	Delay     = netproxy.Delay
	Blackhole = netproxy.Blackhole
	Drop      = netproxy.Drop
)

// NewProxy is netproxy.NewProxy.
var NewProxy = netproxy.NewProxy
