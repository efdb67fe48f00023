package sqlfence

// MaxNameBytes is the bound on a fence name, for the package's external tests.
const MaxNameBytes = maxNameBytes
