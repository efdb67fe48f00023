// Package fencing is what a lease holder uses to write FencedResources safely.
package fencing
