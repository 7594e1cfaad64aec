package verify

import (
	"bytes"

	"strings"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/hiddeco/sshsig"
	"golang.org/x/crypto/ssh"
)

// sshNamespace is the sshsig namespace git signs with (gpg-interface.c).
const sshNamespace = "git"

// verifySSH checks an SSHSIG signature as git does (gpg-interface.c,
// verify_ssh_signed_buffer): the signature must verify over the payload in
// namespace "git" (else B); then the allowed-signers file is searched for
// the key at the signer's (committer or tagger) time: a match reads G with
// that line's principals, no match U.
func verifySSH(o *Object, opts *Options, r *Result) *Error {
	sig, err := sshsig.Unarmor(bytes.TrimRight(o.Signature, "\n"))
	if err != nil {
		r.Verdict, r.Letter = ledger.VerdictError, "E"
		return wrapErr(ErrMalformed, err, "ssh signature")
	}
	r.Key = ssh.FingerprintSHA256(sig.PublicKey)
	r.SignedAt = o.SignerTime
	if cert, ok := sig.PublicKey.(*ssh.Certificate); ok {
		r.Key = ssh.FingerprintSHA256(cert.Key)
	}
	if sig.Namespace != sshNamespace {
		r.Verdict, r.Letter = ledger.VerdictBad, "B"
		return newErr(ErrBadSignature, "ssh signature namespace %q, want %q", sig.Namespace, sshNamespace)
	}
	if err := sshsig.Verify(bytes.NewReader(o.Payload), sig, sig.PublicKey, sig.HashAlgorithm, sshNamespace); err != nil {
		r.Verdict, r.Letter = ledger.VerdictBad, "B"
		return wrapErr(ErrBadSignature, err, "ssh")
	}
	if opts.AllowedSigners == nil {
		r.Verdict, r.Letter = ledger.VerdictGood, "U"
		return newErr(ErrUnknownKey, "good signature, no allowed-signers file configured")
	}
	m := opts.AllowedSigners.find(sig.PublicKey, sshNamespace, o.SignerTime)
	if m.entry == nil {
		r.Letter = "U"
		if m.outside {
			r.Verdict = ledger.VerdictExpiredKey
			return newErr(ErrExpired, "good signature, key not valid at %s in allowed signers", o.SignerTime.UTC().Format("2006-01-02T15:04:05Z"))
		}
		r.Verdict = ledger.VerdictGood
		return newErr(ErrUnknownKey, "good signature, key not in allowed signers")
	}
	r.Verdict, r.Letter = ledger.VerdictGood, "G"
	r.Signer = strings.Join(m.entry.Principals, ",")
	return nil
}
