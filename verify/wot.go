package verify

import (
	"crypto"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/packet"
)

// Introducer is a certifying OpenPGP key named by primary-key fingerprint
// (hex, any case), with the longest certification path it may start:
// Depth 1 (the default when 0) admits only keys it certified itself;
// Depth n also keys certified by a key it validated at distance below n,
// as an OpenPGP trust signature of level n-1 would (RFC 4880 5.2.3.13).
type Introducer struct {
	Fingerprint string `json:"fingerprint"`
	Depth       int    `json:"depth,omitempty"`
}

// Certification is one step of a web-of-trust path: Certifier's primary
// key certified UserID on Certified's primary key at Created.
type Certification struct {
	Certifier string    `json:"certifier"`
	Certified string    `json:"certified"`
	UserID    string    `json:"user_id"`
	Created   time.Time `json:"created"`
	Hash      string    `json:"hash"`
}

// weakCertHash lists the digests gpg 2.2 refuses in certifications by
// default (its weak-digest list holds MD5 only); SHA-1 is accepted.
var weakCertHash = map[crypto.Hash]bool{crypto.MD5: true}

// sha1Cutoff is the time after which gpg 2.2 (since 2.2.18) rejects
// SHA-1 third-party key signatures, unless --allow-weak-key-signatures
// (GnuPG sig-check.c: 2019-01-19T00:00:00Z, 1547856000).
var sha1Cutoff = time.Unix(1547856000, 0)

func sha1AfterCutoff(sig *packet.Signature) bool {
	return sig.Hash == crypto.SHA1 && sig.CreationTime.After(sha1Cutoff)
}

// maxCertDepth bounds certification paths (gpg's max-cert-depth is 5 by
// default; a policy may ask for up to 8).
const maxCertDepth = 8

// wot computes key validity over a keyring at a time, the way gpg's trust
// model does for certifiers whose ownertrust is full or ultimate: a key is
// valid when one of its user ids, self-signed and unrevoked, carries a
// usable certification (see certifications) by the primary key of an
// introducer, or, within the introducer's depth, of a key valid that way
// in turn. A key in a path must never have been revoked and must not be
// expired at now. A wot is used by one verification only (it memoizes).
type wot struct {
	ring     openpgp.EntityList
	now      time.Time
	depths   map[string]int // introducer primary fingerprint -> depth
	maxDepth int
	certs    map[*openpgp.Entity][]certBy // memoized certifications
}

func newWOT(ring openpgp.EntityList, now time.Time, trusted []string, intro []Introducer) *wot {
	w := &wot{ring: ring, now: now, depths: map[string]int{}, certs: map[*openpgp.Entity][]certBy{}}
	for _, f := range trusted {
		// gpg's ultimately trusted keys introduce at distance 1: keys
		// they certify are valid, and those keys' own ownertrust (unknown
		// here) would be needed to go further.
		if w.depths[normFpr(f)] < 1 {
			w.depths[normFpr(f)] = 1
		}
	}
	for _, in := range intro {
		d := in.Depth
		if d <= 0 {
			d = 1
		}
		d = min(d, maxCertDepth)
		if w.depths[normFpr(in.Fingerprint)] < d {
			w.depths[normFpr(in.Fingerprint)] = d
		}
	}
	for _, d := range w.depths {
		w.maxDepth = max(w.maxDepth, d)
	}
	return w
}

// usable reports whether e may take part in a path at w.now: never
// revoked (gpg applies a key revocation whatever its date), not expired.
func (w *wot) usable(e *openpgp.Entity) bool {
	if len(e.Revocations) > 0 {
		return false
	}
	id := e.PrimaryIdentity()
	if id == nil || id.SelfSignature == nil {
		return false
	}
	return !e.PrimaryKey.KeyExpired(id.SelfSignature, w.now)
}

// path returns a certification path from an introducer to e (the first
// step the introducer's), or nil when e is not valid by certification.
// Shorter paths are found first.
func (w *wot) path(e *openpgp.Entity) []Certification {
	if len(w.depths) == 0 || !w.usable(e) {
		return nil
	}
	for n := 1; n <= w.maxDepth; n++ {
		if p := w.find(e, n, n, map[*openpgp.Entity]bool{e: true}); p != nil {
			return p
		}
	}
	return nil
}

// find looks for a path of n certifications ending at e, starting at an
// introducer whose depth admits a path of total steps.
func (w *wot) find(e *openpgp.Entity, n, total int, seen map[*openpgp.Entity]bool) []Certification {
	for _, c := range w.certifications(e) {
		ce := c.by
		if n == 1 {
			if w.depths[c.step.Certifier] >= total {
				return []Certification{c.step}
			}
			continue
		}
		if seen[ce] {
			continue
		}
		seen[ce] = true
		p := w.find(ce, n-1, total, seen)
		delete(seen, ce)
		if p != nil {
			return append(p, c.step)
		}
	}
	return nil
}

type certBy struct {
	by   *openpgp.Entity
	step Certification
}

// certifications lists the usable third-party certifications on e's
// valid user ids, by usable keys of the ring, as gpg's
// mark_usable_uid_certs (key-clean.c) selects them: of one certifier's
// signatures on a user id that verify (certifications of class 0x10, 0x12
// or 0x13, gpg's default min-cert-level 2 dropping 0x11, and certification
// revocations 0x30), the latest counts, the later packet on equal times; a
// revocation revokes, an expired latest certification does not fall back
// to an older one. (gpg also prefers a non-revocable certification over a
// later revocation; go-crypto does not expose that flag.)
func (w *wot) certifications(e *openpgp.Entity) []certBy {
	if c, ok := w.certs[e]; ok {
		return c
	}
	out := []certBy{}
	defer func() { w.certs[e] = out }()
	target := fpr(e.PrimaryKey.Fingerprint)
	for name, id := range e.Identities {
		// A user id counts while self-signed and neither revoked nor past its
		// self-signature's lifetime (a self-signature refreshed after now
		// still vouches for the user id, as gpg reads the key).
		if id.SelfSignature == nil || id.Revoked(w.now) || sigLifetimeOver(id.SelfSignature, w.now) {
			continue
		}
		latest := map[*openpgp.Entity]*packet.Signature{}
		var order []*openpgp.Entity
		for _, sig := range id.Signatures {
			if sig.IssuerKeyId == nil || sig.CheckKeyIdOrFingerprint(e.PrimaryKey) {
				continue
			}
			if !isCertification(sig.SigType) && sig.SigType != packet.SigTypeCertificationRevocation {
				continue
			}
			if weakCertHash[sig.Hash] || sha1AfterCutoff(sig) || sig.CreationTime.After(w.now) {
				continue
			}
			by := w.primaryByID(*sig.IssuerKeyId, sig)
			if by == nil {
				continue
			}
			if _, intro := w.depths[fpr(by.PrimaryKey.Fingerprint)]; !intro && w.maxDepth == 1 {
				// Paths of one step only start at an introducer: other
				// certifiers cannot matter, so their signatures are not
				// verified at all.
				continue
			}
			if by.PrimaryKey.VerifyUserIdSignature(name, e.PrimaryKey, sig) != nil {
				continue
			}
			prev, seen := latest[by]
			if !seen {
				order = append(order, by)
			}
			if !seen || !sig.CreationTime.Before(prev.CreationTime) {
				latest[by] = sig
			}
		}
		for _, by := range order {
			sig := latest[by]
			if !isCertification(sig.SigType) || sig.SigExpired(w.now) || !w.usable(by) {
				continue
			}
			out = append(out, certBy{by: by, step: Certification{
				Certifier: fpr(by.PrimaryKey.Fingerprint), Certified: target, UserID: name,
				Created: sig.CreationTime.UTC(), Hash: sig.Hash.String(),
			}})
		}
	}
	return out
}

func isCertification(t packet.SignatureType) bool {
	switch t {
	case packet.SigTypeGenericCert, packet.SigTypeCasualCert, packet.SigTypePositiveCert:
		return true
	}
	return false
}

// primaryByID returns the entity whose primary key issued sig
// (certifications are made by primary keys), or nil.
func (w *wot) primaryByID(id uint64, sig *packet.Signature) *openpgp.Entity {
	for _, k := range w.ring.KeysById(id) {
		if k.Entity != nil && k.PublicKey == k.Entity.PrimaryKey && sig.CheckKeyIdOrFingerprint(k.PublicKey) {
			return k.Entity
		}
	}
	return nil
}
