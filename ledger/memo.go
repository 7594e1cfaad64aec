package ledger

import (
	"bytes"
	"crypto/sha256"
	"sync"
)

// Large inputs are canonicalized several times on one request's way into
// the log (a signed evidence payload by the envelope check, by the
// record's signer check and as the record's own details). byteMemo keeps
// the results of such pure functions for inputs of at least memoMin
// bytes, keyed by the SHA-256 of the input, so the repeats cost a hash
// instead of a decode and an encode. At most memoMaxBytes of results are
// kept (the oldest are dropped first). Safe for concurrent use; results
// are returned as copies.
const (
	memoMin      = 64 << 10
	memoMaxBytes = 32 << 20
)

type byteMemo struct {
	mu    sync.Mutex
	m     map[[32]byte][]byte
	order [][32]byte
	bytes int
}

// do returns f(in), from the memo when in was seen (or was the result of
// an earlier call). f must be a pure function of in; its errors are not
// kept.
func (c *byteMemo) do(in []byte, f func([]byte) ([]byte, error)) ([]byte, error) {
	if len(in) < memoMin {
		return f(in)
	}
	k := sha256.Sum256(in)
	c.mu.Lock()
	out, ok := c.m[k]
	c.mu.Unlock()
	if ok {
		return bytes.Clone(out), nil
	}
	out, err := f(in)
	if err != nil || len(out) > memoMaxBytes/4 {
		return out, err
	}
	kept := bytes.Clone(out)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[[32]byte][]byte{}
	}
	c.put(k, kept)
	if !bytes.Equal(in, out) {
		// A result given again (already canonical) maps to itself.
		c.put(sha256.Sum256(out), kept)
	}
	return out, nil
}

func (c *byteMemo) put(k [32]byte, v []byte) {
	if _, ok := c.m[k]; ok {
		return
	}
	for c.bytes+len(v) > memoMaxBytes && len(c.order) > 0 {
		old := c.order[0]
		c.order = c.order[1:]
		c.bytes -= len(c.m[old])
		delete(c.m, old)
	}
	c.m[k] = v
	c.order = append(c.order, k)
	c.bytes += len(v)
}
