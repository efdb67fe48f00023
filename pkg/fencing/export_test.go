package fencing

// RefusedBy is refusedBy, for the external tests.
var RefusedBy = refusedBy
