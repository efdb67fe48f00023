// Package elector is Lease-based leader election that hands out fencing epochs.
package elector
