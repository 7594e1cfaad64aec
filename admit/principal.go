package admit

import "github.com/evidence-ledger/ledger/ledger"

// Kind is the kind of a Principal.
type Kind int

const (
	// Anonymous is a request no token authenticated (a server whose
	// writes need none): nothing is stamped.
	Anonymous Kind = iota
	// TokenHolder is a request authenticated by a bearer token.
	TokenHolder
	// AgentKey is an approved agent whose request signature was
	// verified, posting with the token it polled with.
	AgentKey
	// LocalAdmin is the holder of the database file (`ledger record
	// --db`, `ledger run`): nothing is stamped, no token scope applies.
	LocalAdmin
)

// Principal is who asks for an append. A runner key is not a principal
// of its own: it signs DSSE envelopes that a principal posts, and Admit
// verifies each envelope's signature and stamps the record with both.
type Principal struct {
	Kind  Kind
	Token ledger.Token // TokenHolder and AgentKey: the request's token
	Agent string       // AgentKey: the agent's name
}

// Anon is the anonymous Principal.
func Anon() Principal { return Principal{Kind: Anonymous} }

// Administrator is the local administrator's Principal.
func Administrator() Principal { return Principal{Kind: LocalAdmin} }

// ByToken is the Principal of a request authenticated by t.
func ByToken(t ledger.Token) Principal { return Principal{Kind: TokenHolder, Token: t} }

// ByAgent is the Principal of approved agent name posting with token t.
func ByAgent(name string, t ledger.Token) Principal {
	return Principal{Kind: AgentKey, Token: t, Agent: name}
}

// hasToken reports whether p was authenticated by a token.
func (p Principal) hasToken() bool {
	return p.Kind == TokenHolder || p.Kind == AgentKey
}

// Recorder is the recorded_by of p's records: the token that
// authenticated it; nil for the anonymous and the local administrator
// (nothing is stamped).
func (p Principal) Recorder() *ledger.Recorder {
	if !p.hasToken() {
		return nil
	}
	return &ledger.Recorder{Token: &ledger.RecorderToken{ID: p.Token.ID, Name: p.Token.Name}}
}
