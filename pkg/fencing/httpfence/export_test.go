package httpfence

// Waiting reports how many Admit calls wait for key (for tests that must know a request is queued).
func (s *MemoryStore) Waiting(key string) int { return int(s.key(key).waiting.Load()) }

// The header parsers, for the package's external tests: users go through Middleware and Transport.
var (
	ParseHeader     = parseHeader
	TokenFromHeader = tokenFromHeader
)
