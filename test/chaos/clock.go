package chaos

import (
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// ScaledClock is a clock whose time runs at a rate relative to its base clock (fault F8): at rate 0.5 it
// reads one second for every two of the base clock's, so an elector on it believes it still leads after its
// Lease expired in real time; at rate 2 a standby on it takes over a Lease before it expired. SetRate
// changes the rate without a jump: the clock goes on from its current reading.
//
// Timers and tickers last their duration divided by the rate at the moment they are armed; a rate change
// does not re-arm them. pkg/elector re-reads Now after every wake-up, so that an early or late timer only
// moves when it next looks, never what it decides.
type ScaledClock struct {
	base clock.WithTicker

	mu       sync.Mutex
	rate     float64
	baseAt   time.Time // base reading at the last rate change
	scaledAt time.Time // this clock's reading at the last rate change
}

var _ clock.WithTicker = (*ScaledClock)(nil)

// NewScaledClock returns a clock that reads as base and runs at rate 1 until SetRate.
func NewScaledClock(base clock.WithTicker) *ScaledClock {
	now := base.Now()
	return &ScaledClock{base: base, rate: 1, baseAt: now, scaledAt: now}
}

// SetRate makes the clock run at rate (> 0) times the base clock's speed from now on.
func (c *ScaledClock) SetRate(rate float64) {
	if rate <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.base.Now()
	c.scaledAt, c.baseAt, c.rate = c.readLocked(now), now, rate
}

// Rate is the current rate.
func (c *ScaledClock) Rate() float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rate
}

func (c *ScaledClock) readLocked(baseNow time.Time) time.Time {
	return c.scaledAt.Add(time.Duration(float64(baseNow.Sub(c.baseAt)) * c.rate))
}

// real converts a duration on this clock into one on the base clock at the current rate.
func (c *ScaledClock) real(d time.Duration) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Duration(float64(d) / c.rate)
}

func (c *ScaledClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.readLocked(c.base.Now())
}

func (c *ScaledClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

func (c *ScaledClock) After(d time.Duration) <-chan time.Time { return c.base.After(c.real(d)) }

func (c *ScaledClock) NewTimer(d time.Duration) clock.Timer {
	return &scaledTimer{Timer: c.base.NewTimer(c.real(d)), c: c}
}

func (c *ScaledClock) Sleep(d time.Duration) { c.base.Sleep(c.real(d)) }

func (c *ScaledClock) Tick(d time.Duration) <-chan time.Time { return c.base.Tick(c.real(d)) }

func (c *ScaledClock) NewTicker(d time.Duration) clock.Ticker { return c.base.NewTicker(c.real(d)) }

// scaledTimer re-arms in this clock's time.
type scaledTimer struct {
	clock.Timer
	c *ScaledClock
}

func (t *scaledTimer) Reset(d time.Duration) bool { return t.Timer.Reset(t.c.real(d)) }
