package certs

// WriteFiles is writeFiles, for the tests of the cert dir's layout.
var WriteFiles = writeFiles
