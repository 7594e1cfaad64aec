package runs

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The headers of an agent's signed request: the agent's name, the Unix
// time in seconds the request was signed at, and the base64 Ed25519
// signature of SigningString.
const (
	HeaderAgent     = "Ledger-Agent"
	HeaderAgentDate = "Ledger-Agent-Date"
	HeaderAgentSig  = "Ledger-Agent-Signature"
)

// MaxSkew is how far an agent request's date may be from the server's
// clock.
const MaxSkew = 2 * time.Minute

// SigningString is what an agent signs for one request: a domain line,
// the method, the path below /api/v1 ("/agent/poll"), the agent's name,
// the date (Unix seconds) and the hex SHA-256 of the body, one per line.
func SigningString(method, path, agent string, date int64, body []byte) []byte {
	sum := sha256.Sum256(body)
	return fmt.Appendf(nil, "ledger-agent-request/v1\n%s\n%s\n%s\n%d\n%s\n", method, path, agent, date, hex.EncodeToString(sum[:]))
}

// SignRequest returns the signature header values for a request.
func SignRequest(priv ed25519.PrivateKey, method, path, agent string, now time.Time, body []byte) (date, sig string) {
	d := now.Unix()
	s := ed25519.Sign(priv, SigningString(method, path, agent, d, body))
	return strconv.FormatInt(d, 10), base64.StdEncoding.EncodeToString(s)
}

// VerifyRequest checks a signed request's date against now (within
// MaxSkew) and its signature under pub. The error says which failed,
// without echoing the headers.
func VerifyRequest(pub ed25519.PublicKey, method, path, agent, date, sig string, now time.Time, body []byte) error {
	d, err := strconv.ParseInt(strings.TrimSpace(date), 10, 64)
	if err != nil {
		return fmt.Errorf("%s must be Unix seconds", HeaderAgentDate)
	}
	if skew := now.Sub(time.Unix(d, 0)); skew > MaxSkew || skew < -MaxSkew {
		return fmt.Errorf("%s is %s from the server's clock (at most %s)", HeaderAgentDate, skew.Round(time.Second), MaxSkew)
	}
	b, err := base64.StdEncoding.DecodeString(sig)
	if err != nil || !ed25519.Verify(pub, SigningString(method, path, agent, d, body), b) {
		return fmt.Errorf("%s does not verify under agent %s's key", HeaderAgentSig, agent)
	}
	return nil
}
