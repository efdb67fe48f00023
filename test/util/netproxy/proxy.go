// Package netproxy is an in-process TCP proxy whose faults a test switches: passing, delaying, holding
// every byte (a partition) or dropping connections. test/chaos injects its network faults with it; the
// tests of a lost Lease put it between a process and the apiserver.
package netproxy

import (
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// Mode is what a Proxy does to the bytes it carries.
type Mode int

const (
	// Pass forwards bytes as they come.
	Pass Mode = iota
	// Delay holds every chunk for the proxy's delay before forwarding it (a slow link or apiserver).
	Delay
	// Blackhole forwards nothing and holds what it has read, as a partitioned network that TCP
	// retransmits across: when the mode changes back, the held bytes arrive late (a request sent during
	// the partition reaches the server after it). New connections are accepted and held too.
	Blackhole
	// Drop resets every open connection and closes new ones at once.
	Drop
)

func (m Mode) String() string {
	return [...]string{"pass", "delay", "blackhole", "drop"}[m]
}

// Proxy is an in-process TCP proxy between one client and a server, whose Mode the fault injectors change.
type Proxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	mode    Mode
	delay   time.Duration
	changed chan struct{} // closed and replaced on every change
	conns   map[net.Conn]struct{}
	closed  bool
}

// NewProxy listens on 127.0.0.1 (port 0: any) and forwards to target.
func NewProxy(listen, target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, changed: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	go p.serve()
	return p, nil
}

// Addr is the proxy's listening address.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Set changes the mode (and, for Delay, the delay per chunk).
func (p *Proxy) Set(m Mode, delay time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mode, p.delay = m, delay
	close(p.changed)
	p.changed = make(chan struct{})
	if m == Drop {
		for c := range p.conns {
			_ = c.Close()
		}
	}
}

// Close stops the proxy and closes its connections.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	_ = p.ln.Close()
	p.Set(Pass, 0) // release held copiers
}

func (p *Proxy) state() (Mode, time.Duration, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode, p.delay, p.changed
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.mode == Drop {
		_ = c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	_ = c.Close()
}

func (p *Proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.handle(c)
	}
}

func (p *Proxy) handle(client net.Conn) {
	if !p.track(client) {
		return
	}
	defer p.untrack(client)
	if !p.gate() {
		return
	}
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	if !p.track(server) {
		return
	}
	defer p.untrack(server)
	done := make(chan struct{}, 2)
	go func() { p.pipe(server, client); done <- struct{}{} }()
	go func() { p.pipe(client, server); done <- struct{}{} }()
	<-done // one side ended: close both (deferred), which ends the other
}

// gate waits while the proxy blackholes; it reports false if the connection must be dropped.
func (p *Proxy) gate() bool {
	for {
		mode, _, changed := p.state()
		switch mode {
		case Blackhole:
			<-changed
		case Drop:
			return false
		default:
			return true
		}
	}
}

// pipe copies src to dst chunk by chunk, applying the mode to each chunk.
func (p *Proxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32*1024)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.gate() {
				return
			}
			if mode, d, _ := p.state(); mode == Delay && d > 0 {
				time.Sleep(d)
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				return
			}
			if cw, ok := dst.(*net.TCPConn); ok {
				_ = cw.CloseWrite()
			}
			return
		}
	}
}
