// Package controllers holds the fencekit operator's controllers.
package controllers
